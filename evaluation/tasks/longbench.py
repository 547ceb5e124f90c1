"""LongBench (Bai et al., 2024) from its JSON-lines files, with its prompts, answer budgets and metrics.

Each line of a LongBench file holds `input` (the question, or the query part
of few-shot/code prompts), `context`, `answers` (list), `length`, `dataset`
and, for classification, `all_classes`. Prompts use LongBench's per-dataset
templates (`config/dataset2prompt.json` of the LongBench repository, checked
character by character); answer budgets follow its `dataset2maxlen.json`.

Metrics as in LongBench's `metrics.py`, as numbers in [0, 1] (LongBench
reports x100), the best over the gold answers:
- QA and TriviaQA: token F1 after SQuAD normalisation (`evaluation.metrics.token_f1`);
- summaries (gov_report, qmsum, multi_news, samsum): ROUGE-L F, computed with
  `rouge_score` (LongBench calls the `rouge` package; values can differ slightly);
- trec: LongBench's classification score (1/m when the gold class is among the m
  classes named in the prediction, else 0);
- passage_count / passage_retrieval_en: the share of numbers in the prediction
  equal to the gold count / paragraph number;
- lcc / repobench-p: similarity of the first non-comment line of the prediction
  to the gold line, `difflib.SequenceMatcher.ratio` (LongBench uses
  `fuzzywuzzy.fuzz.ratio`, which equals it up to rounding when python-Levenshtein
  is absent).
For trec, triviaqa and samsum the prediction is cut to its first non-empty line first.

`max_length` drops examples that are too long (the REPO paper keeps those
under 16K tokens): measured as prompt tokens when a tokenizer is given, else
by the file's `length` field, which counts whitespace-separated *words* for
English datasets (a rough proxy: one word is about 1.3 tokens).

Positions: passage_retrieval_en knows where the answer is (paragraph N of the
context), so `gold_position` = N - 1 among `num_positions` paragraphs and
`item_spans` are the paragraphs; every other dataset has one position (0 of 1)
and one item, the context.
"""

from __future__ import annotations

import dataclasses
import difflib
import itertools
import re
from collections.abc import Iterator, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

from evaluation.metrics import rouge_l, token_f1
from evaluation.tasks.base import Task, read_jsonl
from evaluation.tasks.ruler import count_tokens, resolve_tokenizer

_MULTI_DOC = (
    "Answer the question based on the given passages. Only give me the answer and do not output any other words."
    "\n\nThe following are given passages.\n{context}\n\nAnswer the question based on the given passages. Only "
    "give me the answer and do not output any other words.\n\nQuestion: {input}\nAnswer:"
)
_QASPER_RULE = (
    "as concisely as you can, using a single phrase or sentence if possible. If the question cannot be answered "
    'based on the information in the article, write "unanswerable". If the question is a yes/no question, answer '
    '"yes", "no", or "unanswerable". Do not provide any explanation.'
)
#: LongBench's templates (exact copies of its config/dataset2prompt.json entries for these datasets).
PROMPTS: dict[str, str] = {
    "narrativeqa": (
        "You are given a story, which can be either a novel or a movie script, and a question. Answer the question "
        "as concisely as you can, using a single phrase if possible. Do not provide any explanation.\n\nStory: "
        "{context}\n\nNow, answer the question based on the story as concisely as you can, using a single phrase "
        "if possible. Do not provide any explanation.\n\nQuestion: {input}\n\nAnswer:"
    ),
    "qasper": (
        f"You are given a scientific article and a question. Answer the question {_QASPER_RULE}\n\nArticle: "
        f"{{context}}\n\n Answer the question based on the above article {_QASPER_RULE}\n\nQuestion: {{input}}"
        "\n\nAnswer:"
    ),
    "multifieldqa_en": (
        "Read the following text and answer briefly.\n\n{context}\n\nNow, answer the following question based on "
        "the above text, only give me the answer and do not output any other words.\n\nQuestion: {input}\nAnswer:"
    ),
    "hotpotqa": _MULTI_DOC,
    "2wikimqa": _MULTI_DOC,
    "musique": _MULTI_DOC,
    "gov_report": (
        "You are given a report by a government agency. Write a one-page summary of the report.\n\nReport:\n"
        "{context}\n\nNow, write a one-page summary of the report.\n\nSummary:"
    ),
    "qmsum": (
        "You are given a meeting transcript and a query containing a question or instruction. Answer the query in "
        "one or more sentences.\n\nTranscript:\n{context}\n\nNow, answer the query based on the above meeting "
        "transcript in one or more sentences.\n\nQuery: {input}\nAnswer:"
    ),
    "multi_news": (
        "You are given several news passages. Write a one-page summary of all news. \n\nNews:\n{context}\n\n"
        "Now, write a one-page summary of all the news.\n\nSummary:"
    ),
    "trec": "Please determine the type of the question below. Here are some examples of questions.\n\n{context}\n{input}",
    "triviaqa": (
        "Answer the question based on the given passage. Only give me the answer and do not output any other words. "
        "The following are some examples.\n\n{context}\n\n{input}"
    ),
    "samsum": "Summarize the dialogue into a few short sentences. The following are some examples.\n\n{context}\n\n{input}",
    "passage_count": (
        "There are some paragraphs below sourced from Wikipedia. Some of them may be duplicates. Please carefully "
        "read these paragraphs and determine how many unique paragraphs there are after removing duplicates. In "
        "other words, how many non-repeating paragraphs are there in total?\n\n{context}\n\nPlease enter the final "
        "count of unique paragraphs after removing duplicates. The output format should only contain the number, "
        "such as 1, 2, 3, and so on.\n\nThe final answer is: "
    ),
    "passage_retrieval_en": (
        "Here are 30 paragraphs from Wikipedia, along with an abstract. Please determine which paragraph the "
        "abstract is from.\n\n{context}\n\nThe following is an abstract.\n\n{input}\n\nPlease enter the number of "
        'the paragraph that the abstract is from. The answer format must be like "Paragraph 1", "Paragraph 2", '
        "etc.\n\nThe answer is: "
    ),
    "lcc": "Please complete the code given below. \n{context}Next line of code:\n",
    "repobench-p": "Please complete the code given below. \n{context}{input}Next line of code:\n",
}
#: LongBench's answer budgets (new tokens) per dataset.
MAX_NEW_TOKENS = {
    "narrativeqa": 128, "qasper": 128, "multifieldqa_en": 64, "hotpotqa": 32, "2wikimqa": 32, "musique": 32,
    "gov_report": 512, "qmsum": 512, "multi_news": 512, "trec": 64, "triviaqa": 32, "samsum": 128,
    "passage_count": 32, "passage_retrieval_en": 32, "lcc": 64, "repobench-p": 64,
}  # fmt: skip
#: Few-shot datasets: LongBench stops at a newline and scores the first line.
FIRST_LINE = ("trec", "triviaqa", "samsum")


def count_score(prediction: str, answer: str) -> float:
    """Share of the numbers in the prediction that equal the gold count (0 with no number)."""
    numbers = re.findall(r"\d+", prediction)
    return sum(n == str(answer) for n in numbers) / len(numbers) if numbers else 0.0


def retrieval_score(prediction: str, answer: str) -> float:
    """Share of the numbers in the prediction that equal the gold 'Paragraph N' number."""
    match = re.search(r"Paragraph (\d+)", answer)
    if match is None:
        raise ValueError(f"passage_retrieval answer {answer!r} does not name a paragraph ('Paragraph N')")
    return count_score(prediction, match.group(1))


def code_similarity(prediction: str, answer: str) -> float:
    """Similarity of the first prediction line without a comment or backtick to the gold line."""
    lines = prediction.lstrip("\n").split("\n")
    first = next((line for line in lines if "`" not in line and "#" not in line and "//" not in line), "")
    return difflib.SequenceMatcher(None, first, answer).ratio()


def classification_score(prediction: str, answer: str, all_classes: Sequence[str]) -> float:
    """LongBench's trec score: 1/m when the gold class is among the m classes the prediction names.

    A named class that is a strict substring of the gold class is not counted (as in LongBench).
    (LongBench's fallback to the most similar class is unreachable in its code, so it is omitted.)
    """
    named = [c for c in all_classes if c in prediction]
    named = [c for c in named if not (c in answer and c != answer)]
    return 1.0 / len(named) if answer in named else 0.0


#: LongBench's metric of each dataset.
METRIC_OF = {
    **dict.fromkeys(("narrativeqa", "qasper", "multifieldqa_en", "hotpotqa", "2wikimqa", "musique"), "token_f1"),
    **dict.fromkeys(("gov_report", "qmsum", "multi_news", "samsum"), "rouge_l"),
    "triviaqa": "token_f1",
    "trec": "classification",
    "passage_count": "count",
    "passage_retrieval_en": "retrieval",
    "lcc": "code_similarity",
    "repobench-p": "code_similarity",
}


@dataclasses.dataclass(kw_only=True)
class LongBenchTask(Task):
    """One LongBench dataset from its .jsonl file: LongBench's prompt, metric and answer budget."""

    name = "longbench"

    path: str
    """A LongBench .jsonl(.gz) file (e.g. hotpotqa.jsonl from THUDM/LongBench data.zip)."""
    dataset: str | None = None
    """Which template and metric to use; None = the file's `dataset` field (must be one dataset)."""
    max_length: int | None = None
    """Drop examples longer than this (tokens with a tokenizer, else the `length` field); None = keep all."""
    tokenizer: Any = None
    """Tokenizer measuring max_length (object, local HF directory or 'byte'); None = use the `length` field."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not Path(self.path).is_file():
            raise FileNotFoundError(f"LongBench file {self.path!r} not found; pass path= a LongBench .jsonl file")
        if self.dataset is not None and self.dataset not in PROMPTS:
            raise ValueError(f"unknown LongBench dataset {self.dataset!r}; templates exist for {sorted(PROMPTS)}")
        if self.max_length is not None and (isinstance(self.max_length, bool) or self.max_length < 1):
            raise ValueError(f"max_length must be a positive int or None, got {self.max_length!r}")

    @cached_property
    def records(self) -> list[dict[str, Any]]:
        return read_jsonl(self.path)

    @cached_property
    def resolved_dataset(self) -> str:
        """The dataset named by the config, or by every line of the file."""
        if self.dataset is not None:
            return self.dataset
        names = {str(r.get("dataset")) for r in self.records if isinstance(r, dict)}
        if len(names) != 1:
            raise ValueError(f"{self.path}: lines name datasets {sorted(names)}; pass dataset= to choose a template")
        (name,) = names
        if name not in PROMPTS:
            raise ValueError(f"{self.path}: unknown LongBench dataset {name!r}; templates exist for {sorted(PROMPTS)}")
        return name

    @cached_property
    def all_classes(self) -> list[str]:
        """The class names of a classification file (trec), from its first line that lists them."""
        for record in self.records:
            if record.get("all_classes"):
                return [str(c) for c in record["all_classes"]]
        raise ValueError(f"{self.path}: no line has 'all_classes', which the trec score needs")

    @property
    def metric_name(self) -> str:  # type: ignore[override]  (the dataset decides)
        return f"longbench_{METRIC_OF[self.resolved_dataset]}"

    def generation_defaults(self) -> tuple[int, tuple[str, ...]]:
        dataset = self.resolved_dataset
        return MAX_NEW_TOKENS[dataset], ("\n",) if dataset in FIRST_LINE else ()

    def score(self, prediction: str, answers: Sequence[str]) -> float:
        dataset = self.resolved_dataset
        if isinstance(answers, str) or not answers:
            raise ValueError(f"answers must be a non-empty list of strings, got {answers!r}")
        if dataset in FIRST_LINE:
            prediction = prediction.lstrip("\n").split("\n")[0]
        kind = METRIC_OF[dataset]
        if kind == "token_f1":
            return token_f1(prediction, answers)
        if kind == "rouge_l":
            return rouge_l(prediction, answers)
        scores = {
            "count": lambda a: count_score(prediction, a),
            "retrieval": lambda a: retrieval_score(prediction, a),
            "classification": lambda a: classification_score(prediction, a, self.all_classes),
            "code_similarity": lambda a: code_similarity(prediction, a),
        }[kind]
        return max(scores(str(a)) for a in answers)

    def extra_features(self) -> dict[str, Any]:
        return {
            "dataset": "string",
            "length": "int64",
            "prompt_tokens": "int64",
            "source_index": "int64",
        }

    def rows(self) -> Iterator[dict[str, Any]]:
        dataset = self.resolved_dataset
        template = PROMPTS[dataset]
        tokenizer = resolve_tokenizer(self.tokenizer) if self.tokenizer is not None else None
        kept = []
        for line, record in enumerate(self.records):
            where = f"{self.path}, line {line + 1}"
            missing = [k for k in ("input", "context", "answers") if not isinstance(record, dict) or k not in record]
            if missing:
                raise ValueError(f"{where}: missing field(s) {missing}; is this a LongBench file?")
            answers = record["answers"]
            if isinstance(answers, str) or not answers:
                raise ValueError(f"{where}: 'answers' must be a non-empty list of strings, got {answers!r}")
            context, query = str(record["context"]), str(record["input"])
            prompt = template.format(context=context, input=query)  # braces inside the values are kept as they are
            tokens = count_tokens(tokenizer, prompt) if tokenizer is not None else -1
            if self.max_length is not None:
                if tokenizer is None and "length" not in record:
                    raise ValueError(f"{where}: no 'length' field to filter by; pass tokenizer= to measure tokens")
                size = tokens if tokenizer is not None else int(record["length"])
                if size > self.max_length:
                    continue
            kept.append((line, record, prompt, context, tokens))
        for line, record, prompt, context, tokens in self._take(kept, f"{self.path} (after the length filter)"):
            start = prompt.index(context)
            position, count, spans = 0, 1, [[start, start + len(context)]]
            if dataset == "passage_retrieval_en":
                position, count, spans = _paragraphs(context, start, record["answers"][0], self.path, line)
            row_id = f"longbench-{dataset}-{line:05d}"
            yield {
                "id": row_id,
                "example_id": row_id,
                "task": self.name,
                "prompt": prompt,
                "answers": [str(a) for a in record["answers"]],
                "gold_position": position,
                "num_positions": count,
                "item_spans": spans,
                "dataset": dataset,
                "length": int(record.get("length", -1)),
                "prompt_tokens": tokens,
                "source_index": line,
            }


def _paragraphs(context: str, start: int, answer: str, path: str, line: int) -> tuple[int, int, list[list[int]]]:
    """Gold paragraph index, paragraph count and prompt spans of 'Paragraph N: ...' blocks of a retrieval context."""
    marks = list(re.finditer(r"Paragraph (\d+):", context))
    match = re.search(r"Paragraph (\d+)", answer)
    if not marks or match is None:
        raise ValueError(f"{path}, line {line + 1}: expected 'Paragraph N:' blocks and an answer 'Paragraph N'")
    bounds = [m.start() for m in marks] + [len(context)]
    spans = [[start + a, start + a + len(context[a:b].rstrip())] for a, b in itertools.pairwise(bounds)]
    numbers = [int(m.group(1)) for m in marks]
    gold = int(match.group(1))
    if gold not in numbers:
        raise ValueError(f"{path}, line {line + 1}: answer names paragraph {gold}, absent from the context")
    return numbers.index(gold), len(numbers), spans
