"""The `Task` interface shared by the long-context tasks, and the helpers they share.

A task is a small config object (dataclass fields, validated on construction)
whose `build()` returns a `datasets.Dataset` with one row per (example, gold
position). Every task emits the same core columns, so a generation harness,
a calibrator or a search can consume any task without knowing which it is:

- `id` (str): stable row id, unique within a build; `example_id` (str) is shared by
  the rows of one example at different positions (for paired comparisons);
- `prompt` (str), `answers` (list[str]), `task` (str);
- `gold_position` (int, 0-based) and `num_positions` (int): where the relevant item sits
  among how many items;
- `item_spans` (list of [start, end)): character offsets of each item (document line,
  KV line) in `prompt`, newline excluded, in order, so `prompt[s:e]` is item i.

Builds are deterministic: the same config (seed included) gives the same dataset.

Columns are declared as plain type names (`"string"`, `"int64"`, `["string"]` for a list) and become
`datasets` features only in `build()`: a task module loads no `datasets` (seconds of start-up), so
`evaluation run --help` and `--print_config` build the tasks' configurations without it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from evaluation.metrics import get_metric, score_batch
from repo_common.json_files import json_lines

if TYPE_CHECKING:
    import datasets

#: Named gold-position grids, as fractions of the last index (k - 1); each name says where the positions lie.
GRIDS: dict[str, tuple[Fraction, ...]] = {
    # first, 20%, middle, 80%, last (the grid of the CALIOPE paper)
    "ends-20-50-80": tuple(Fraction(x) for x in ("0", "1/5", "1/2", "4/5", "1")),
    # first, 25%, middle, 75%, last (the grid of the LPES paper)
    "quartiles": tuple(Fraction(x) for x in ("0", "1/4", "1/2", "3/4", "1")),
}
GRID_NAMES = (*GRIDS, "all")
#: Grid names of earlier versions, which read like methods: refused with the new name.
RENAMED_GRIDS = {"caliope": "ends-20-50-80", "lpes": "quartiles"}
#: One line per grid for --help and error messages.
GRID_HELP = "ends-20-50-80 = first, 20%, 50%, 80%, last; quartiles = first, 25%, 50%, 75%, last; all = every item"

GoldPositions = str | int | Sequence[int]

#: Rows converted to Arrow at a time by `Task.build` (bounds the Python objects of a large build).
BUILD_CHUNK = 2048

#: A column's type: a `datasets.Value` dtype name, or a one-element list `[TYPE]` for a list of TYPE.
ColumnType = str | list[Any]

BASE_FEATURES: dict[str, ColumnType] = {
    "id": "string",
    "example_id": "string",
    "task": "string",
    "prompt": "string",
    "answers": ["string"],
    "gold_position": "int64",
    "num_positions": "int64",
    "item_spans": [["int64"]],
}


def feature_of(column: Any) -> Any:
    """The `datasets` feature of a column type (`"int64"` -> Value, `["string"]` -> List); a feature as it is."""
    import datasets  # heavy: a task module stays importable without it (evaluation run --help, --print_config)

    if isinstance(column, str):
        return datasets.Value(column)
    if isinstance(column, list) and len(column) == 1:
        return datasets.List(feature_of(column[0]))
    return column


def refuse_renamed_grid(spec: object) -> None:
    """Raise a one-line ValueError naming the new grid when `spec` is a grid name of an earlier version."""
    if isinstance(spec, str) and spec.lower() in RENAMED_GRIDS:
        new = RENAMED_GRIDS[spec.lower()]
        raise ValueError(
            f"the gold-position grid {spec!r} is now called {new!r} ({GRID_HELP}); pass --gold_positions {new} "
            f"(gold_positions: {new} in a config)"
        )


def resolve_gold_positions(spec: GoldPositions, num_positions: int) -> list[int]:
    """Turn a grid name, an int or a list of ints into sorted, distinct 0-based positions.

    Named grids scale fractions by k - 1 with exact arithmetic and Python's `round`
    (round half to even): ends-20-50-80 at k=20 is 0, 3.8, 9.5, 15.2, 19 -> [0, 4, 10, 15, 19];
    quartiles at k=20 is 0, 4.75, 9.5, 14.25, 19 -> [0, 5, 10, 14, 19]. Off-centre halves
    round to even, which keeps those grids mirror-symmetric; only the exact middle of an
    even k picks a side. Duplicates (small k) are dropped.
    """
    if num_positions < 1:
        raise ValueError(f"the number of positions must be >= 1, got {num_positions}")
    last = num_positions - 1
    refuse_renamed_grid(spec)
    if isinstance(spec, str):
        name = spec.lower()
        if name == "all":
            return list(range(num_positions))
        if name not in GRIDS:
            raise ValueError(
                f"unknown gold-position grid {spec!r}; use one of {list(GRID_NAMES)} or a list of 0-based ints"
            )
        return sorted({round(fraction * last) for fraction in GRIDS[name]})
    items = [spec] if isinstance(spec, int) else list(spec)
    if not items or any(isinstance(p, bool) or not isinstance(p, int) for p in items):
        raise ValueError(
            f"gold_positions must be a grid name {list(GRID_NAMES)}, an int or a non-empty list of ints; got {spec!r}"
        )
    bad = [p for p in items if not 0 <= p <= last]
    if bad:
        raise ValueError(
            f"gold position(s) {bad} outside [0, {last}] for {num_positions} items; positions are 0-based, "
            f"so use 0..{last} (or a grid name such as 'all')"
        )
    return sorted(set(items))


def example_rng(seed: int, *parts: object) -> random.Random:
    """A `random.Random` seeded from (seed, parts) via SHA-256: independent per example, stable across runs."""
    key = ":".join(str(x) for x in (seed, *parts)).encode()
    return random.Random(int.from_bytes(hashlib.sha256(key).digest()[:16], "big"))


def source_fingerprint(row: Mapping[str, Any]) -> str:
    """16 hex digits naming a row's source example by its content, the same at every gold position.

    A question-answering row (a `question` column: MDQA) is named by its question and answers, so the
    same question counts as the same example at any number of documents or distractor seed; any other
    row by its items (the KV pairs, sorted and without the separators of their place: moving the gold pair
    does not change them), what it
    asks (`query` or `key`) and its answers. `evaluation.search_overlap` compares these with the examples
    a search was fitted on, whatever offsets, seeds or files either used.
    """
    answers = sorted(str(a) for a in row["answers"])
    if row.get("question"):
        identity: list[Any] = ["question", str(row["question"]), answers]
    else:
        prompt = str(row["prompt"])
        # an item's text without the separators its place adds (a JSON object's braces and commas)
        items = sorted(prompt[start:end].strip(" \n,{}") for start, end in row.get("item_spans") or [])
        asked = next((str(row[c]) for c in ("query", "key") if row.get(c)), "")
        identity = ["items", items or [str(row["example_id"])], asked, answers]
    return hashlib.sha256(json.dumps(identity, ensure_ascii=False).encode()).hexdigest()[:16]


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """All values of a JSON-lines file, gzipped when the name ends in .gz; blank lines skipped.

    A garbage line, a file that is not gzip (or a truncated one) or a line longer
    than `repo_common.json_files.MAX_LINE_BYTES` is one error naming the file and the line.

    A file without any (empty, or blank lines only) is an error: no task has anything to build from it.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"data file {str(path)!r} not found; pass the path of an existing .jsonl or .jsonl.gz file"
        )
    rows = [row for _, row in json_lines(path, "is this a JSON-lines data file? fix or delete that line")]
    if not rows:
        raise ValueError(
            f"data file {str(path)!r} is empty (no JSON lines); pass a .jsonl(.gz) file with examples, "
            "e.g. the release's (docs/evaluation.md)"
        )
    return rows


def join_items(header: str, items: Sequence[str], footer: str, separator: str = "\n") -> tuple[str, list[list[int]]]:
    """`header + separator.join(items) + footer`, with the [start, end) span of each item in the result."""
    spans: list[list[int]] = []
    cursor = len(header)
    for index, item in enumerate(items):
        if index:
            cursor += len(separator)
        spans.append([cursor, cursor + len(item)])
        cursor += len(item)
    return header + separator.join(items) + footer, spans


#: Source examples one task of a run may build: the largest released long-context sets hold a few thousand, and
#: a generated task asked for a billion would spend minutes generating before any other check could answer.
MAX_EXAMPLES = 1_000_000


@dataclasses.dataclass(kw_only=True)
class Task(ABC):
    """Base of all tasks: config fields, validation on construction, `build()` and `score()`."""

    name: ClassVar[str]
    #: Name of the `evaluation.metrics` metric `score` uses.
    metric_name: ClassVar[str] = "best_subspan_em"
    #: "generation" (greedy answers, scored by `score`) or "loglikelihood" (options ranked by `evaluation.loglik`).
    scoring: ClassVar[str] = "generation"
    #: Log-likelihood tasks: score the options through the KV cache (a field of the tasks that offer the choice).
    use_kv_cache: ClassVar[bool] = False
    #: The task's file in a data folder (`--data_dir`), a glob formatted with the task's parameters; None = none.
    data_file_pattern: ClassVar[str | None] = None
    #: What to do when the data folder lacks that file (appended to the error).
    data_file_hint: ClassVar[str] = "pass another --data_dir, or the file itself as path="

    num_examples: int | None = None
    """Number of source examples to use (each gives one row per gold position); None = all."""
    seed: int = 0
    """Seed of every random choice of the build; the same seed gives the same dataset."""
    example_offset: int = 0
    """Source examples skipped first, e.g. the questions an LPES search used (its fitness and held-out sets):
    examples `example_offset .. example_offset + num_examples - 1`, with the same ids and contexts as in a
    build from 0 (generated tasks generate from that index on)."""

    def __post_init__(self) -> None:
        if self.num_examples is not None and (isinstance(self.num_examples, bool) or self.num_examples < 1):
            raise ValueError(f"num_examples must be >= 1 or None (all), got {self.num_examples!r}")
        if self.num_examples is not None and self.num_examples > MAX_EXAMPLES:
            raise ValueError(
                f"num_examples={self.num_examples:,} is more than one run builds ({MAX_EXAMPLES:,} source examples, "
                "each a row per gold position); split it into runs with example_offset, or pass fewer"
            )
        offset = self.example_offset
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValueError(f"example_offset must be an int >= 0 (source examples to skip), got {offset!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise TypeError(f"seed must be an int, got {self.seed!r}")

    @abstractmethod
    def rows(self) -> Iterator[dict[str, Any]]:
        """Yield the rows of the dataset (core columns plus `extra_features`), in a deterministic order."""

    def extra_features(self) -> dict[str, Any]:
        """Task-specific columns and their types (`ColumnType`, or a `datasets` feature)."""
        return {}

    def features(self) -> datasets.Features:
        import datasets  # heavy: only a build needs it (see the module's docstring)

        columns = {**BASE_FEATURES, **self.extra_features()}
        return datasets.Features({name: feature_of(column) for name, column in columns.items()})

    def build(self) -> datasets.Dataset:
        """The task's rows as a `datasets.Dataset` (deterministic for a given config).

        Rows are converted to Arrow `BUILD_CHUNK` at a time, so the Python
        objects of a large build (75 KV positions × 500 examples = 37,500
        prompts with their spans) never exist all at once; the dataset holds
        the same rows in the same order as one `from_list` of them all.
        """
        import datasets  # heavy: only a build needs it (see the module's docstring)

        features = self.features()
        parts: list[datasets.Dataset] = []
        chunk: list[dict[str, Any]] = []
        for row in self.rows():
            chunk.append(row)
            if len(chunk) == BUILD_CHUNK:
                parts.append(datasets.Dataset.from_list(chunk, features=features))
                chunk = []
        if chunk or not parts:
            parts.append(datasets.Dataset.from_list(chunk, features=features))
        return parts[0] if len(parts) == 1 else datasets.concatenate_datasets(parts)

    def score(self, prediction: str, answers: Sequence[str]) -> float:
        """Score one generated answer against the gold answers with the task's metric."""
        return get_metric(self.metric_name)(prediction, answers)

    def score_batch(self, predictions: Sequence[str], answers: Sequence[Sequence[str]]) -> list[float]:
        """`score` of each row; one call of the metric's `evaluate` module unless the task overrides `score`."""
        if type(self).score is Task.score:
            return score_batch(self.metric_name, predictions, answers)
        return [self.score(p, a) for p, a in zip(predictions, answers, strict=True)]

    def _take(self, examples: list[Any], what: str) -> list[Any]:
        """Examples `example_offset ..` (`num_examples` of them, or all), or an error when the source has fewer.

        Callers number them from `example_offset` (`enumerate(..., start=self.example_offset)`), so an
        example keeps its id and seeded choices whatever the offset.
        """
        first = self.example_offset
        if (first and first >= len(examples)) or (
            self.num_examples is not None and first + self.num_examples > len(examples)
        ):
            wanted = "at least one" if self.num_examples is None else f"{self.num_examples}"
            skipped = f" after example_offset={first}" if first else ""
            raise ValueError(
                f"num_examples={self.num_examples} but {what} has only {len(examples)} examples ({wanted} needed"
                f"{skipped}); lower num_examples{' or example_offset' if first else ''}, or pass None to use all"
            )
        return examples[first:] if self.num_examples is None else examples[first : first + self.num_examples]

    def example_indices(self) -> range:
        """The source indices a generated task builds: `num_examples` of them from `example_offset`."""
        return range(self.example_offset, self.example_offset + (self.num_examples or 0))

    def generation_defaults(self) -> tuple[int, tuple[str, ...]]:
        """(max new tokens, stop strings) of greedy decoding when the run does not set them: one short line."""
        return 32, ("\n",)

    def gold_continuation(self, answers: Sequence[str], chat_template: bool) -> str:
        """The text a model should write after the prompt for a right answer (what `gold_loglik` scores).

        The first gold answer after lm-eval's target delimiter, a space; none after a chat template's
        generation prompt, where the assistant's turn starts on its own.
        """
        if not answers:
            raise ValueError(f"a {self.name} row has no gold answer: the gold log-likelihood needs one")
        return ("" if chat_template else " ") + answers[0]

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def find_data_file(cls, data_dir: str | Path, params: Mapping[str, Any]) -> Path | None:
        """This task's file in `data_dir` for these parameters (the first match of `data_file_pattern`).

        None when the task reads no file from a data folder; an error naming the
        pattern when it does and the folder lacks the file.
        """
        if cls.data_file_pattern is None:
            return None
        pattern = cls.data_file_pattern.format(**params)
        matches = sorted(p for p in Path(data_dir).glob(pattern) if p.is_file())
        if not matches:
            shown = pattern.replace(".jsonl*", ".jsonl(.gz)")
            raise FileNotFoundError(f"no {shown} in --data_dir {str(data_dir)!r}; {cls.data_file_hint}")
        return matches[0].resolve()
