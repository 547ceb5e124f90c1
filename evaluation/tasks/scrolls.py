"""Long-document tasks in the ZeroSCROLLS / L-Eval style, from local JSON-lines files.

Two kinds of task: open-ended (summaries, free-form answers), scored by
ROUGE-1/2/L, their geometric mean (ZeroSCROLLS's summary score) or token F1;
closed-ended (multiple choice, short exact answers), scored by exact match
after normalisation or by the set of option letters named.

Field mapping, by `format`:
- `plain`: `context` (the document), `question` (optional instruction),
  `answers` (list) or `answer` (string); the prompt is `template` (below, or yours).
- `zeroscrolls` (its HF files): `input` is the full released prompt and is used
  as is; answers from `outputs` (list) or `output` (string; the test split has
  none, so use validation); `document_start_index`/`document_end_index`, when
  present, give the document's span; `id` names the row.
- `leval` (its JSON lines): `input` is the document, `instructions` a list of
  questions and `outputs` the matching answers: one row per question.

Positions: there is one (0 of 1), and one item, the document.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from evaluation.metrics import exact_match, rouge_scores, token_f1
from evaluation.tasks.base import Task, read_jsonl

FORMATS = ("plain", "zeroscrolls", "leval")
OPEN_METRICS = ("rouge1", "rouge2", "rougeL", "rouge_geo", "token_f1")
CLOSED_METRICS = ("exact_match", "choice_accuracy")
#: Default prompt of `plain` files (this project's wording).
PLAIN_TEMPLATE = "Read the document below, then answer.\n\nDocument:\n{context}\n\nInstruction: {question}\nAnswer:"
#: Default prompt of `leval` files: a paraphrase of L-Eval's instruction, not its exact text.
LEVAL_TEMPLATE = (
    "You are given a long document. Follow the instruction that comes after it. For a multiple-choice question, "
    "reply only with the letter or letters of the correct options.\n\nDocument:\n{context}\n\nInstruction: "
    "{question}\nAnswer:"
)
_LETTERS = re.compile(r"^[A-E]+$")


def choice_letters(text: str) -> frozenset[str]:
    """Option letters the first line names: its leading run ('B', '(B) plum', 'ABD', 'A, C and D.'), else any
    standalone letter A-E in it ('The answer is B')."""
    first = text.strip().split("\n", 1)[0] if text.strip() else ""
    letters: set[str] = set()
    for word in re.findall(r"[A-Za-z]+", first):
        if _LETTERS.match(word):
            letters.update(word)
        elif word not in ("and", "or") or not letters:
            break
    return frozenset(letters) or frozenset(re.findall(r"\b([A-E])\b", first))


def choice_accuracy(prediction: str, answers: Sequence[str]) -> float:
    """1.0 when the letters the prediction names equal a gold answer's letters (gold: 'B' or 'ABD')."""
    predicted = choice_letters(prediction)
    for answer in answers:
        gold = answer.strip().rstrip(".")
        if not _LETTERS.match(gold):
            raise ValueError(f"choice_accuracy needs option-letter answers such as 'B' or 'ACD', got {answer!r}")
        if predicted == frozenset(gold):
            return 1.0
    return 0.0


def open_scores(prediction: str, answers: Sequence[str]) -> dict[str, float]:
    """ROUGE-1/2/L F (each best over answers), their geometric mean, and token F1."""
    rouge = rouge_scores(prediction, answers)
    geo = math.prod(rouge[k] for k in ("rouge1", "rouge2", "rougeL")) ** (1 / 3)
    return {**rouge, "rouge_geo": geo, "token_f1": token_f1(prediction, answers)}


@dataclasses.dataclass(kw_only=True)
class ScrollsTask(Task):
    """A long-document task from a local file: open-ended (ROUGE/F1) or closed-ended (exact match / letters)."""

    name = "scrolls"

    path: str
    """A .jsonl(.gz) file in the layout named by `format`."""
    format: str = "plain"
    """'plain', 'zeroscrolls' or 'leval' (field mapping in the module docstring)."""
    kind: str = "open"
    """'open' (summaries, free answers) or 'closed' (multiple choice, short exact answers)."""
    metric: str | None = None
    """Open: rouge1, rouge2, rougeL (default), rouge_geo, token_f1. Closed: exact_match (default), choice_accuracy."""
    template: str | None = None
    """Prompt with {context} and {question} for plain/leval files; None = the format's default."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.format not in FORMATS:
            raise ValueError(f"unknown format {self.format!r}; choose one of {list(FORMATS)}")
        if self.kind not in ("open", "closed"):
            raise ValueError(f"kind must be 'open' or 'closed', got {self.kind!r}")
        allowed = OPEN_METRICS if self.kind == "open" else CLOSED_METRICS
        if self.metric is not None and self.metric not in allowed:
            raise ValueError(f"metric {self.metric!r} does not fit kind={self.kind!r}; choose one of {list(allowed)}")
        if self.template is not None and "{context}" not in self.template:
            raise ValueError("template must contain {context} (and usually {question})")
        if not Path(self.path).is_file():
            raise FileNotFoundError(f"data file {self.path!r} not found; pass path= a .jsonl file ({self.format})")

    @property
    def metric_name(self) -> str:  # type: ignore[override]  (configured per instance)
        return self.metric or ("rougeL" if self.kind == "open" else "exact_match")

    def generation_defaults(self) -> tuple[int, tuple[str, ...]]:
        """Open: room for a summary, no stop. Closed: a short first-line answer."""
        return (512, ()) if self.kind == "open" else (32, ("\n",))

    def score_all(self, prediction: str, answers: Sequence[str]) -> dict[str, float]:
        """Every metric of the task's kind (choice_accuracy only when the answers are option letters)."""
        if isinstance(answers, str) or not answers:
            raise ValueError(f"answers must be a non-empty list of strings, got {answers!r}")
        if self.kind == "open":
            return open_scores(prediction, answers)
        scores = {"exact_match": exact_match(prediction, answers)}
        if all(_LETTERS.match(a.strip().rstrip(".")) for a in answers):
            scores["choice_accuracy"] = choice_accuracy(prediction, answers)
        return scores

    def score(self, prediction: str, answers: Sequence[str]) -> float:
        if self.metric_name == "choice_accuracy":
            return choice_accuracy(prediction, answers)
        if self.metric_name == "exact_match":
            return exact_match(prediction, answers)
        return self.score_all(prediction, answers)[self.metric_name]

    def extra_features(self) -> dict[str, Any]:
        return {"question": "string", "source_index": "int64"}

    def rows(self) -> Iterator[dict[str, Any]]:
        examples = []
        for line, record in enumerate(read_jsonl(self.path)):
            where = f"{self.path}, line {line + 1}"
            if not isinstance(record, dict):
                raise TypeError(f"{where}: expected a JSON object, got {type(record).__name__}")
            examples.extend(getattr(self, f"_{self.format}")(record, line, where))
        for row_id, line, prompt, span, question, answers in self._take(examples, repr(self.path)):
            yield {
                "id": row_id,
                "example_id": row_id,
                "task": self.name,
                "prompt": prompt,
                "answers": answers,
                "gold_position": 0,
                "num_positions": 1,
                "item_spans": [span],
                "question": question,
                "source_index": line,
            }

    def _prompt(self, context: str, question: str) -> tuple[str, list[int]]:
        template = self.template or (LEVAL_TEMPLATE if self.format == "leval" else PLAIN_TEMPLATE)
        prompt = template.format(context=context, question=question)
        start = len(template[: template.index("{context}")].format(question=question))
        return prompt, [start, start + len(context)]

    def _plain(self, record: dict, line: int, where: str):
        if "context" not in record:
            raise ValueError(f"{where}: a 'plain' line needs 'context' (and 'answers' or 'answer')")
        answers = _answers(record, ("answers", "answer"), where)
        question = str(record.get("question", ""))
        prompt, span = self._prompt(str(record["context"]), question)
        yield f"{self.name}-{line:05d}", line, prompt, span, question, answers

    def _zeroscrolls(self, record: dict, line: int, where: str):
        if "input" not in record:
            raise ValueError(f"{where}: a ZeroSCROLLS line needs 'input' (the released prompt)")
        answers = _answers(record, ("outputs", "output"), where)
        prompt = str(record["input"])
        start, end = record.get("document_start_index", 0), record.get("document_end_index", len(prompt))
        row_id = str(record.get("id", f"{self.name}-{line:05d}"))
        query = prompt[record["query_start_index"] :] if "query_start_index" in record else ""
        yield row_id, line, prompt, [int(start), int(end)], query, answers

    def _leval(self, record: dict, line: int, where: str):
        missing = [k for k in ("input", "instructions", "outputs") if k not in record]
        if missing:
            raise ValueError(f"{where}: an L-Eval line needs 'input', 'instructions', 'outputs'; missing {missing}")
        if len(record["instructions"]) != len(record["outputs"]):
            raise ValueError(
                f"{where}: {len(record['instructions'])} instructions but {len(record['outputs'])} outputs"
            )
        for i, (question, output) in enumerate(zip(record["instructions"], record["outputs"])):
            prompt, span = self._prompt(str(record["input"]), str(question))
            answers = [str(a) for a in output] if isinstance(output, list) else [str(output)]
            yield f"{self.name}-{line:05d}-q{i:02d}", line, prompt, span, str(question), answers


def _answers(record: dict, keys: tuple[str, str], where: str) -> list[str]:
    """Gold answers from the list field or the string field, whichever is present and non-empty."""
    listed, single = record.get(keys[0]), record.get(keys[1])
    if isinstance(listed, list) and listed:
        return [str(a) for a in listed]
    if isinstance(single, str) and single:
        return [single]
    raise ValueError(f"{where}: no gold answer (expected a non-empty '{keys[0]}' list or '{keys[1]}' string)")
