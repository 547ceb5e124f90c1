"""Multi-document question answering (MDQA) of "Lost in the Middle" (Liu et al., TACL 2024).

A NaturalQuestions-Open question comes with k documents, one of which (the
gold passage) contains the answer; accuracy as a function of the gold
document's position shows how well a model uses each part of its context.

`MDQATask` builds prompts from an nq-open-oracle file (one gold passage per
question): the k - 1 distractors are gold passages of *other* questions, drawn
per question from the seed, and kept in the same order at every gold position
so that positions are compared on identical contexts (a paired design). By
default, passages containing the question's answer (as whole words, after
normalisation) are skipped, since a distractor that answers the question would
blur where the answer sits.
`MDQAReleaseTask` reads the release's ready-made files
(`nq-open-{k}_total_documents_gold_at_{i}.jsonl.gz`, retrieved distractors)
into the same row schema.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from evaluation.metrics import normalize_answer
from evaluation.sample_data import NQ_OPEN_ORACLE, NQ_RELEASE_FILE, RELEASE, nq_file_hint
from evaluation.tasks.base import GoldPositions, Task, example_rng, join_items, read_jsonl, resolve_gold_positions

INSTRUCTION = (
    "Write a high-quality answer for the given question using only the provided search results "
    "(some of which might be irrelevant).\n\n"
)


@dataclasses.dataclass(frozen=True)
class Passage:
    """One Wikipedia passage as the release stores it."""

    title: str
    text: str


def format_document(index: int, passage: Passage) -> str:
    """The release's line for the document at 0-based `index` (numbered from 1 in the prompt)."""
    return f"Document [{index + 1}](Title: {passage.title}) {passage.text}"


def build_mdqa_prompt(question: str, documents: Sequence[Passage]) -> tuple[str, list[list[int]]]:
    """The release's MDQA prompt (no trailing newline after "Answer:") and each document line's span."""
    lines = [format_document(i, doc) for i, doc in enumerate(documents)]
    return join_items(INSTRUCTION, lines, f"\n\nQuestion: {question}\nAnswer:")


def _passage(ctx: Any, where: str) -> Passage:
    if not isinstance(ctx, dict) or "title" not in ctx or "text" not in ctx:
        raise ValueError(f"{where}: each entry of 'ctxs' needs 'title' and 'text'; is this an nq-open file?")
    if not isinstance(ctx["title"], str) or not isinstance(ctx["text"], str):
        raise ValueError(f"{where}: 'title' and 'text' of each entry of 'ctxs' must be strings")  # noqa: TRY004  (a user error)
    return Passage(ctx["title"], ctx["text"])


def _question_fields(record: Any, where: str) -> tuple[str, list[str], list[Any]]:
    missing = [key for key in ("question", "answers", "ctxs") if not isinstance(record, dict) or key not in record]
    if missing:
        raise ValueError(f"{where}: missing field(s) {missing}; expected an nq-open line with question/answers/ctxs")
    question, answers, ctxs = record["question"], record["answers"], record["ctxs"]
    if not isinstance(question, str) or not question.strip():
        raise ValueError(f"{where}: 'question' must be a non-empty string, got {question!r}")
    if not isinstance(answers, list) or not answers or not all(isinstance(a, str) for a in answers):
        raise ValueError(f"{where}: 'answers' must be a non-empty list of strings, got {answers!r}")
    # An answer that normalises to "" is a substring of every prediction: it would score every answer 1.0.
    if not any(normalize_answer(a) for a in answers):
        raise ValueError(
            f"{where}: every gold answer in {answers!r} is empty once normalised (lower case, no punctuation or "
            "articles), so any prediction would match it; fix or drop the line"
        )
    if not isinstance(ctxs, list):
        raise ValueError(f"{where}: 'ctxs' must be a list of passages, got {type(ctxs).__name__}")  # noqa: TRY004  (a user error)
    return question, answers, ctxs


class _ReleaseDecoding:
    """What both MDQA tasks share: the Lost in the Middle release's decoding and the record's columns."""

    def generation_defaults(self) -> tuple[int, tuple[str, ...]]:
        """As in the release: up to 100 tokens, the answer is its first line."""
        return 100, ("\n",)

    def extra_features(self) -> dict[str, Any]:
        return {"question": "string", "gold_title": "string", "doc_titles": ["string"], "source_index": "int64"}


@dataclasses.dataclass(kw_only=True)
class MDQATask(_ReleaseDecoding, Task):
    """MDQA from an nq-open-oracle file, distractors = other questions' gold passages, gold at chosen positions."""

    name = "mdqa"
    data_file_pattern = "nq-open-oracle*.jsonl*"
    data_file_hint = f"download {NQ_RELEASE_FILE} of {RELEASE} into it"

    path: str | None = None
    """nq-open-oracle-style .jsonl(.gz): question, answers, ctxs = [gold passage]; None = the 40-question sample
    shipped with the package (`evaluation.sample_data`: a smoke test, not a benchmark)."""
    num_documents: int = 20
    """k, the total number of documents in each prompt (the gold one included)."""
    gold_positions: GoldPositions = "ends-20-50-80"
    """Gold document indices: 'ends-20-50-80' (first, 20%, 50%, 80%, last), 'quartiles', 'all', an int or
    a list of 0-based ints."""
    exclude_answer_distractors: bool = True
    """Skip distractors whose normalized title+text contains a gold answer as whole words (they would leak it)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        k = self.num_documents
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"num_documents (k) must be an int >= 1, got {k!r}; the papers use 10, 20, 30, 50, 100")
        resolve_gold_positions(self.gold_positions, k)  # fail now, not after reading the file
        if self.path is None:
            self.path = str(NQ_OPEN_ORACLE)
        if not Path(self.path).is_file():
            raise FileNotFoundError(f"MDQA data file {self.path!r} not found; {nq_file_hint('path=')}")

    def rows(self) -> Iterator[dict[str, Any]]:
        records = read_jsonl(self.path)
        questions: list[tuple[str, list[str], Passage]] = []
        for line, record in enumerate(records):
            where = f"{self.path}, example {line}"
            question, answers, ctxs = _question_fields(record, where)
            gold = [c for c in ctxs if isinstance(c, dict) and c.get("isgold")] or ctxs[:1]
            if len(gold) != 1:
                raise ValueError(f"{where}: expected one gold passage in 'ctxs', found {len(gold)}")
            questions.append((question, answers, _passage(gold[0], where)))

        pool = list(dict.fromkeys(passage for _, _, passage in questions))  # distinct passages, file order
        normalized_pool = (
            [f" {normalize_answer(f'{p.title} {p.text}')} " for p in pool] if self.exclude_answer_distractors else []
        )
        k = self.num_documents
        positions = resolve_gold_positions(self.gold_positions, k)
        if k - 1 > len(pool) - 1:
            raise ValueError(
                f"num_documents={k} needs {k - 1} distractor passages per question, but {self.path!r} has only "
                f"{len(pool) - 1} distinct passages besides each question's own; lower num_documents or use a "
                "file with more questions"
            )

        for line, (question, answers, gold) in enumerate(self._take(questions, repr(self.path)), self.example_offset):
            distractors = self._draw_distractors(line, gold, answers, pool, normalized_pool)
            example_id = f"mdqa-k{k}-s{self.seed}-q{line:05d}"
            for position in positions:
                documents = [*distractors[:position], gold, *distractors[position:]]
                prompt, spans = build_mdqa_prompt(question, documents)
                yield {
                    "id": f"{example_id}-pos{position:03d}",
                    "example_id": example_id,
                    "task": self.name,
                    "prompt": prompt,
                    "answers": answers,
                    "gold_position": position,
                    "num_positions": k,
                    "item_spans": spans,
                    "question": question,
                    "gold_title": gold.title,
                    "doc_titles": [doc.title for doc in documents],
                    "source_index": line,
                }

    def _draw_distractors(
        self, line: int, gold: Passage, answers: list[str], pool: list[Passage], normalized_pool: list[str]
    ) -> list[Passage]:
        """k - 1 distinct passages other than `gold`, in a seeded per-question order.

        The order depends on (seed, question line) only, so a smaller k draws a prefix of a
        larger k's distractors and `num_examples` does not change any question's context.
        """
        order = list(range(len(pool)))
        example_rng(self.seed, "mdqa", line).shuffle(order)
        # whole-word match on normalized text (the DPR "has answer" idea): a short answer such as "S"
        # or "5" must not rule out every passage that merely contains the letter or digit
        needles = [f" {a} " for a in (normalize_answer(x) for x in answers) if a]
        chosen: list[Passage] = []
        for index in order:
            if len(chosen) == self.num_documents - 1:
                break
            if pool[index] == gold:
                continue
            if needles and normalized_pool and any(n in normalized_pool[index] for n in needles):
                continue
            chosen.append(pool[index])
        if len(chosen) < self.num_documents - 1:
            raise ValueError(
                f"question {line} of {self.path!r}: only {len(chosen)} of the {self.num_documents - 1} distractors "
                "needed do not contain its answer; lower num_documents, use a larger file, or pass "
                "exclude_answer_distractors=False"
            )
        return chosen


#: A release file's name: k documents, the gold one at index i.
RELEASE_FILE = re.compile(r"nq-open-(\d+)_total_documents_gold_at_(\d+)\.jsonl(\.gz)?")


def release_files(folder: Path, k: int) -> dict[int, Path]:
    """The release's MDQA files for k documents under `folder` (any depth, as its qa_data/{k}_total_documents
    folders hold them), by gold position."""
    found: dict[int, Path] = {}
    for path in sorted(folder.rglob(f"nq-open-{k}_total_documents_gold_at_*.jsonl*")):
        match = RELEASE_FILE.fullmatch(path.name)
        if match and path.is_file():
            found.setdefault(int(match.group(2)), path)
    return dict(sorted(found.items()))


@dataclasses.dataclass(kw_only=True)
class MDQAReleaseTask(_ReleaseDecoding, Task):
    """MDQA from the release's files `nq-open-{k}_total_documents_gold_at_{i}.jsonl.gz` (all k documents given):
    one file, or a folder of them (every gold position the release wrote, the same questions at each)."""

    name = "mdqa_release"
    #: `--data_dir` gives the folder itself (`find_data_file`): its files for k are read, one per gold position.
    data_file_pattern = "**/nq-open-{num_documents}_total_documents_gold_at_*.jsonl*"
    data_file_hint = "download the qa_data folder of " + RELEASE + " into it (its {k}_total_documents folders)"

    path: str
    """A release multi-document .jsonl(.gz) (ctxs holds all k documents, `isgold` marks the gold one), or a folder
    holding them at any depth (the release's qa_data): its files for num_documents, one gold position each."""
    num_documents: int = 20
    """k of the files read from a folder (the release has 10, 20 and 30); a single file has its own."""
    positions: list[int] | None = None
    """Gold positions read from a folder (each must have its file); None = every file found for k."""

    @classmethod
    def find_data_file(cls, data_dir: str | Path, params: Mapping[str, Any]) -> Path | None:
        """The data folder itself, once it holds the release's files for k."""
        k = params.get("num_documents", 20)
        if not release_files(Path(data_dir), k):
            raise FileNotFoundError(
                f"no nq-open-{k}_total_documents_gold_at_*.jsonl(.gz) under --data_dir {str(data_dir)!r}; "
                f"{cls.data_file_hint}"
            )
        return Path(data_dir).resolve()

    def __post_init__(self) -> None:
        super().__post_init__()
        if not Path(self.path).exists():
            raise FileNotFoundError(
                f"MDQA release file {self.path!r} not found; pass path= a "
                "nq-open-{k}_total_documents_gold_at_{i}.jsonl(.gz) file of the Lost in the Middle release, or its "
                "qa_data folder"
            )
        if Path(self.path).is_dir():
            found = release_files(Path(self.path), self.num_documents)
            missing = sorted(set(self.positions or found) - set(found))
            if not found or missing:
                raise FileNotFoundError(
                    f"{self.path!r} has no nq-open-{self.num_documents}_total_documents_gold_at_"
                    f"{missing[0] if missing else '*'}.jsonl(.gz) (gold positions with a file: {sorted(found)}); "
                    "pass positions= some of those, or another num_documents"
                )

    def files(self) -> list[Path]:
        """The release files this task reads, in gold-position order."""
        if not Path(self.path).is_dir():
            return [Path(self.path)]
        found = release_files(Path(self.path), self.num_documents)
        return [found[p] for p in (sorted(self.positions) if self.positions else found)]

    def rows(self) -> Iterator[dict[str, Any]]:
        for path in self.files():
            yield from self._file_rows(path)

    def _file_rows(self, path: Path) -> Iterator[dict[str, Any]]:
        records = read_jsonl(str(path))
        for line, record in enumerate(self._take(records, repr(str(path))), self.example_offset):
            where = f"{path}, example {line}"
            question, answers, ctxs = _question_fields(record, where)
            documents = [_passage(ctx, where) for ctx in ctxs]
            gold = [i for i, ctx in enumerate(ctxs) if ctx.get("isgold")]
            if len(gold) != 1:
                raise ValueError(
                    f"{where}: expected exactly one document with isgold=true, found {len(gold)}; "
                    "for nq-open-oracle files (one passage a question) use the 'mdqa' task"
                )
            k, position = len(documents), gold[0]
            prompt, spans = build_mdqa_prompt(question, documents)
            example_id = f"mdqa-release-k{k}-q{line:05d}"
            yield {
                "id": f"{example_id}-pos{position:03d}",
                "example_id": example_id,
                "task": "mdqa",
                "prompt": prompt,
                "answers": answers,
                "gold_position": position,
                "num_positions": k,
                "item_spans": spans,
                "question": question,
                "gold_title": documents[position].title,
                "doc_titles": [doc.title for doc in documents],
                "source_index": line,
            }
