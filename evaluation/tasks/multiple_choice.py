"""Short-context multiple choice (ARC, BoolQ) scored by log-likelihood of each option, not by generation.

Why: position methods must not cost general ability (the REPO paper checks
short-context benchmarks); likelihood scoring is how those benchmarks are
usually reported (lm-evaluation-harness), and it needs no answer parsing.
The task declares `scoring = "loglikelihood"`; the runner then scores each
row's `choices` with `evaluation.loglik` and records the chosen option.

Formats (lm-evaluation-harness prompts):
- ARC (`question`, `choices` {`text`, `label`}, `answerKey`):
  "Question: {question}\\nAnswer:" with options " {text}";
- BoolQ (`question`, `passage`, `answer` bool):
  "{passage}\\nQuestion: {question}?\\nAnswer:" with options " no", " yes".

Choice rule (`normalization`): 'none' = argmax of the summed log-likelihood
(lm-eval's acc), 'chars' = argmax of the sum divided by the option's length in
characters (lm-eval's acc_norm), 'tokens' = divided by its number of tokens.
Default (None): 'chars' for ARC (the figure usually reported for ARC) and
'none' for BoolQ (whose two options differ in length only by accident).

Rows: `gold_position` = index of the correct option among `num_positions`
options (so accuracy by position shows option-order bias); `item_spans` = the
passage for BoolQ, none for ARC (its options are not in the prompt).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar

from evaluation.tasks.base import Task, read_jsonl

FORMATS = ("auto", "arc", "boolq")
NORMALIZATIONS = ("none", "chars", "tokens")
DEFAULT_NORMALIZATION = {"arc": "chars", "boolq": "none"}


def detect_format(record: Any, where: str) -> str:
    """'arc' or 'boolq' from the fields of one line."""
    if isinstance(record, dict) and {"question", "choices", "answerKey"} <= record.keys():
        return "arc"
    if isinstance(record, dict) and {"question", "passage", "answer"} <= record.keys():
        return "boolq"
    raise ValueError(
        f"{where}: neither ARC (question, choices, answerKey) nor BoolQ (question, passage, answer) fields"
    )


def arc_example(record: dict, where: str) -> tuple[str, list[str], int, list[str], list[list[int]]]:
    """Prompt, options, gold index, option labels and item spans of an ARC line."""
    choices = record["choices"]
    if not isinstance(choices, dict) or not {"text", "label"} <= choices.keys():
        raise ValueError(f"{where}: 'choices' must be an object with 'text' and 'label' lists")
    texts, labels = [str(t) for t in choices["text"]], [str(label) for label in choices["label"]]
    if len(texts) != len(labels) or len(texts) < 2:
        raise ValueError(
            f"{where}: need >= 2 choices with one label each, got {len(texts)} texts, {len(labels)} labels"
        )
    key = str(record["answerKey"])
    if key not in labels:
        raise ValueError(f"{where}: answerKey {key!r} is not one of the labels {labels}")
    return f"Question: {record['question']}\nAnswer:", [f" {t}" for t in texts], labels.index(key), labels, []


def boolq_example(record: dict, where: str) -> tuple[str, list[str], int, list[str], list[list[int]]]:
    """Prompt, options, gold index, option labels and item spans of a BoolQ line."""
    answer = record["answer"]
    if not isinstance(answer, bool):
        raise ValueError(  # noqa: TRY004  (a user's data file: exit 2, one line)
            f"{where}: BoolQ 'answer' must be true or false (a JSON boolean), got {answer!r}; write it as true/false"
        )
    passage = str(record["passage"])
    prompt = f"{passage}\nQuestion: {record['question']}?\nAnswer:"
    return prompt, [" no", " yes"], int(answer), ["no", "yes"], [[0, len(passage)]]


@dataclasses.dataclass(kw_only=True)
class MultipleChoiceTask(Task):
    """ARC- or BoolQ-style multiple choice from a local .jsonl file, scored by option log-likelihood."""

    name = "multiple_choice"
    metric_name = "choice_accuracy"
    scoring: ClassVar[str] = "loglikelihood"

    path: str
    """A .jsonl(.gz) file of ARC or BoolQ lines."""
    format: str = "auto"
    """'arc', 'boolq' or 'auto' (from the first line's fields)."""
    normalization: str | None = None
    """'none' (sum), 'chars' (per character) or 'tokens' (per token); None = 'chars' for ARC, 'none' for BoolQ."""
    use_kv_cache: bool = False
    """Encode the context once and reuse its KV cache for every option (same scores, fewer FLOPs)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.format not in FORMATS:
            raise ValueError(f"unknown format {self.format!r}; choose one of {list(FORMATS)}")
        if self.normalization is not None and self.normalization not in NORMALIZATIONS:
            raise ValueError(f"normalization must be one of {list(NORMALIZATIONS)} or None, got {self.normalization!r}")
        if not Path(self.path).is_file():
            raise FileNotFoundError(f"multiple-choice file {self.path!r} not found; pass path= an ARC/BoolQ .jsonl")

    def generation_defaults(self) -> tuple[int, tuple[str, ...]]:
        """Not used for scoring (nothing is generated); kept small for the shared length check."""
        return 1, ()

    @cached_property
    def resolved_format(self) -> str:
        """'arc' or 'boolq': as configured, or from the file's first line."""
        if self.format != "auto":
            return self.format
        records = read_jsonl(self.path)
        if not records:
            raise ValueError(f"{self.path} has no lines")
        return detect_format(records[0], f"{self.path}, line 1")

    @property
    def rule(self) -> str:
        """The normalization in force: the configured one or the format's default."""
        return self.normalization or DEFAULT_NORMALIZATION[self.resolved_format]

    def choose(self, scores: Sequence[tuple[float, int]], choices: Sequence[str]) -> int:
        """Index of the chosen option from (log-likelihood, token count) pairs; ties go to the first."""
        if len(scores) != len(choices) or not scores:
            raise ValueError(f"choose got {len(scores)} scores for {len(choices)} choices; pass one per option")
        rule = self.rule
        if rule == "chars":
            values = [total / max(len(text), 1) for (total, _), text in zip(scores, choices)]
        elif rule == "tokens":
            values = [total / count for total, count in scores]
        else:
            values = [total for total, _ in scores]
        return max(range(len(values)), key=lambda i: (values[i], -i))

    def score(self, prediction: str, answers: Sequence[str]) -> float:
        """1.0 when the chosen option (its text, as in `choices`) is the gold one."""
        if isinstance(answers, str) or not answers:
            raise ValueError(f"answers must be a non-empty list of strings, got {answers!r}")
        return float(prediction in answers)

    def extra_features(self) -> dict[str, Any]:
        return {
            "choices": ["string"],
            "choice_labels": ["string"],
            "label": "int64",
            "question": "string",
        }

    def rows(self) -> Iterator[dict[str, Any]]:
        fmt = self.resolved_format
        build = arc_example if fmt == "arc" else boolq_example
        for line, record in enumerate(self._take(read_jsonl(self.path), repr(self.path)), self.example_offset):
            where = f"{self.path}, line {line + 1}"
            if detect_format(record, where) != fmt:
                raise ValueError(f"{where}: has {detect_format(record, where)} fields, but the file is {fmt}")
            prompt, choices, gold, labels, spans = build(record, where)
            row_id = f"{fmt}-{line:05d}"
            yield {
                "id": row_id,
                "example_id": row_id,
                "task": self.name,
                "prompt": prompt,
                "answers": [choices[gold]],
                "gold_position": gold,
                "num_positions": len(choices),
                "item_spans": spans,
                "choices": choices,
                "choice_labels": labels,
                "label": gold,
                "question": str(record["question"]),
            }
