"""Key-value retrieval of "Lost in the Middle" (Liu et al., TACL 2024).

The context is a JSON object of random UUID pairs, one pair a line; the model
must return the value of one key. With no natural language to lean on, it
isolates how well each position of the context is retrieved. The gold pair is
moved to each evaluated index while the other pairs keep their relative order,
so positions are compared on the same pairs.

Examples come from a release file (`kv-retrieval-{n}_keys.jsonl(.gz)`:
`ordered_kv_records`, `key`, `value`) or are generated for any number of keys
from the seed (UUID4 strings), so no download is needed.

Templates: "json" is the release's prompt (instruction, JSON object, query).
"pairs" is this project's own minimal format for tiny models trained here
(generated short keys only): each pair is written as key then value with no
separator, pairs separated by spaces, and the prompt ends with the query key,
e.g. "ab3F kc09 ... kc" -> "09". Keys use the letters a-p for the hex digits
0-f and values upper-case hex, so a key can never be read as a value; the
model answers right after the key, the way an induction head copies. The
answer is the value, decoding stops at the next space.

Long "pairs" contexts: one-character keys give at most 8 distinct keys, too
few to push a tiny model past the context lengths it was trained on. With
`distinct_keys`, a prompt of `num_keys` pairs draws them from that many keys:
the gold key occurs once, the other keys repeat (each always with its one
value, as in the key-value streams the built-in base learned from), so the
gold pair can sit anywhere in a context of any length.

Scoring: by default the release's KV criterion, `kv_containment` (the value
occurs in the response, case-insensitive), not the MDQA `best_subspan_em`,
which deletes punctuation and articles and so accepts "ab" for the value
"a-b" and anything for the value "A"; `metric="best_subspan_em"` (or any
`evaluation.metrics.METRICS` name) selects another metric.
"""

from __future__ import annotations

import dataclasses
import random
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from evaluation.metrics import METRICS
from evaluation.sample_data import KV_RELEASE_FILE, RELEASE
from evaluation.tasks.base import GoldPositions, Task, example_rng, join_items, read_jsonl, resolve_gold_positions

INSTRUCTION = "Extract the value corresponding to the specified key in the JSON object below.\n\nJSON data:\n"

KVPair = tuple[str, str]


def format_kv_lines(pairs: Sequence[KVPair]) -> list[str]:
    """The release's JSON lines: '{' opens the first, ' ' the others; ',' ends all but the last, which ends '}'.

    Keys and values are written as-is inside quotes (no JSON escaping), as in the release; UUIDs need none.
    """
    last = len(pairs) - 1
    return [
        f'{"{" if i == 0 else " "}"{key}": "{value}"{"}" if i == last else ","}' for i, (key, value) in enumerate(pairs)
    ]


def build_kv_prompt(pairs: Sequence[KVPair], key: str) -> tuple[str, list[list[int]]]:
    """The release's KV-retrieval prompt (no trailing newline) and the span of each JSON line."""
    if not pairs:
        raise ValueError("a KV-retrieval prompt needs at least one key-value pair")
    return join_items(INSTRUCTION, format_kv_lines(pairs), f'\n\nKey: "{key}"\nCorresponding value:')


#: "pairs" template: hex digit -> key letter (0-f -> a-p).
KEY_LETTERS = str.maketrans("0123456789abcdef", "abcdefghijklmnop")
TEMPLATES = ("json", "pairs")


def pairs_form(pairs: Sequence[KVPair]) -> list[KVPair]:
    """Hex (key, value) pairs as the "pairs" template writes them: key letters a-p, upper-case hex values."""
    return [(key.translate(KEY_LETTERS), value.upper()) for key, value in pairs]


def build_pairs_prompt(pairs: Sequence[KVPair], key: str) -> tuple[str, list[list[int]]]:
    """The "pairs" prompt ("k1v1 k2v2 ... key", pairs already in `pairs_form`) and the span of each pair."""
    if not pairs:
        raise ValueError("a KV-retrieval prompt needs at least one key-value pair")
    return join_items("", [key_ + value for key_, value in pairs], f" {key}", separator=" ")


def move_pair(pairs: Sequence[KVPair], source: int, target: int) -> list[KVPair]:
    """`pairs` with the pair at `source` moved to `target`; the others keep their relative order."""
    rest = [pair for i, pair in enumerate(pairs) if i != source]
    return [*rest[:target], pairs[source], *rest[target:]]


def random_uuid4(rng: random.Random) -> str:
    """A version-4 UUID string from `rng` (uuid.uuid4 reads the OS entropy pool, so it cannot be seeded)."""
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def repeated_context(keys: Sequence[KVPair], num_pairs: int, rng: random.Random) -> tuple[list[KVPair], int]:
    """`num_pairs` pairs: `keys[0]` once at a random index, the other keys in shuffled rounds around it.

    Rounds (every distractor once per round) spread the repeats evenly, so no
    part of the context is made of one key. Returns (pairs, index of keys[0]).
    """
    others = list(keys[1:])
    if not others:
        raise ValueError("a repeated context needs at least one distractor key")
    filler: list[KVPair] = []
    while len(filler) < num_pairs - 1:
        rng.shuffle(others)
        filler += others
    filler = filler[: num_pairs - 1]
    gold = rng.randrange(num_pairs)
    return [*filler[:gold], keys[0], *filler[gold:]], gold


def generate_kv_pairs(num_keys: int, rng: random.Random, key_chars: int | None = None) -> list[KVPair]:
    """`num_keys` (key, value) pairs of UUID4 strings with distinct keys.

    With `key_chars`, keys and values are the first `key_chars` hex digits of
    a UUID4 instead: short strings a small model trained here can handle.
    """

    def draw() -> str:
        text = random_uuid4(rng)
        return text if key_chars is None else text.replace("-", "")[:key_chars]

    pairs: list[KVPair] = []
    keys: set[str] = set()
    while len(pairs) < num_keys:
        key = draw()
        if key not in keys:  # keys must be unique (short keys can collide)
            keys.add(key)
            pairs.append((key, draw()))
    return pairs


@dataclasses.dataclass(kw_only=True)
class KVRetrievalTask(Task):
    """KV retrieval from a release file or generated examples, the gold pair at chosen positions."""

    name = "kv"
    data_file_pattern = "kv-retrieval-{num_keys}_keys.jsonl*"
    data_file_hint = (
        f"pass the --num_keys of a file there, download {KV_RELEASE_FILE} (or the 140 or 300 keys' file) of {RELEASE} "
        "into it, or drop --data_dir to generate examples"
    )

    path: str | None = None
    """Release .jsonl(.gz) (ordered_kv_records, key, value); None = generate examples from the seed."""
    num_keys: int | None = None
    """Pairs per example; required when generating, and if given with a file it must match the file."""
    gold_positions: GoldPositions = "ends-20-50-80"
    """Gold pair indices: 'ends-20-50-80' (first, 20%, 50%, 80%, last), 'quartiles', 'all', an int or
    a list of 0-based ints."""
    key_chars: int | None = None
    """Generated examples only: keys and values of this many hex digits instead of full UUIDs (small models)."""
    template: str = "json"
    """"json" (the release's prompt) or "pairs" (minimal format for tiny models; needs key_chars; see above)."""
    distinct_keys: int | None = None
    """"pairs" only: draw the num_keys pairs from this many keys (the gold once, the others repeated); None = all
    distinct. Long contexts from a small key alphabet (see above)."""
    metric: str = "kv_containment"
    """Metric of `score` (and of the run summary): "kv_containment", the release's KV score, or another
    `evaluation.metrics.METRICS` name such as "best_subspan_em" (see above)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.metric, str) or self.metric not in METRICS:
            raise ValueError(f"unknown kv metric {self.metric!r}; choose one of {sorted(METRICS)}")
        if self.key_chars is not None:
            if isinstance(self.key_chars, bool) or not isinstance(self.key_chars, int) or not 1 <= self.key_chars <= 32:
                raise ValueError(f"key_chars must be an int in [1, 32], got {self.key_chars!r}")
            if self.path is not None:
                raise ValueError("key_chars shortens generated keys; it cannot apply to a release file (drop one)")
            distinct = self.distinct_keys if self.distinct_keys is not None else self.num_keys
            if distinct is not None and isinstance(distinct, int) and distinct > 16**self.key_chars // 2:
                raise ValueError(
                    f"{distinct} distinct keys need more than key_chars={self.key_chars} hex digits"
                    + ("" if self.distinct_keys is not None else "; for longer contexts set distinct_keys= (repeats)")
                )
        if self.template not in TEMPLATES:
            raise ValueError(f"unknown kv template {self.template!r}; choose one of {TEMPLATES}")
        if self.template == "pairs" and self.key_chars is None:
            raise ValueError("the pairs template is for generated short keys: pass key_chars= (e.g. 1 or 2)")
        if self.num_keys is not None and (
            isinstance(self.num_keys, bool) or not isinstance(self.num_keys, int) or self.num_keys < 1
        ):
            raise ValueError(f"num_keys must be an int >= 1, got {self.num_keys!r}; the release uses 75, 140, 300")
        if self.distinct_keys is not None:
            self._check_distinct_keys()
        if self.path is None:
            if self.num_keys is None:
                raise ValueError("KV retrieval needs path= a kv-retrieval .jsonl(.gz) file, or num_keys= to generate")
            if self.num_examples is None:
                raise ValueError("generated KV retrieval needs num_examples= (how many examples to generate)")
        elif not Path(self.path).is_file():
            raise FileNotFoundError(
                f"KV retrieval file {self.path!r} not found; pass path= a kv-retrieval-{{n}}_keys.jsonl(.gz) "
                "file, or path=None with num_keys= to generate examples"
            )
        if self.num_keys is not None:
            resolve_gold_positions(self.gold_positions, self.num_keys)  # fail now, not mid-build

    @property
    def metric_name(self) -> str:  # type: ignore[override]  (configured per instance)
        return self.metric

    def _check_distinct_keys(self) -> None:
        value = self.distinct_keys
        if isinstance(value, bool) or not isinstance(value, int) or value < 2:
            raise ValueError(f"distinct_keys must be an int >= 2 (the gold key and a distractor), got {value!r}")
        if self.template != "pairs":
            raise ValueError("distinct_keys repeats keys, which only the pairs template allows: add template=pairs")
        if isinstance(self.num_keys, int) and value > self.num_keys:
            raise ValueError(f"distinct_keys={value} exceeds num_keys={self.num_keys} (pairs per prompt)")

    def generation_defaults(self) -> tuple[int, tuple[str, ...]]:
        """json: up to 100 tokens, first line; pairs: the value's characters, up to the next space."""
        if self.template == "pairs":
            return self.key_chars or 1, (" ",)
        return 100, ("\n",)

    def gold_continuation(self, answers: Sequence[str], chat_template: bool) -> str:
        """pairs: the value right after the query key (no separator, as the prompt's pairs are written)."""
        if self.template == "pairs":
            return answers[0]
        return super().gold_continuation(answers, chat_template)

    def extra_features(self) -> dict[str, Any]:
        return {
            "key": "string",
            "value": "string",
            "source_index": "int64",
        }

    def examples(self) -> list[tuple[list[KVPair], int]]:
        """(pairs, index of the gold pair) per example, before the gold pair is moved."""
        if self.path is None:
            assert self.num_keys is not None and self.num_examples is not None  # checked in __post_init__
            out = []
            for index in self.example_indices():
                if self.distinct_keys is None:
                    rng = example_rng(self.seed, "kv", self.num_keys, index)
                    pairs = generate_kv_pairs(self.num_keys, rng, self.key_chars)
                    out.append((pairs, rng.randrange(self.num_keys)))
                else:
                    rng = example_rng(self.seed, "kv", self.num_keys, self.distinct_keys, index)
                    keys = generate_kv_pairs(self.distinct_keys, rng, self.key_chars)
                    out.append(repeated_context(keys, self.num_keys, rng))
            return out
        records = self._take(read_jsonl(self.path), repr(self.path))
        return [self._parse(record, line) for line, record in enumerate(records, start=self.example_offset)]

    def _parse(self, record: Any, line: int) -> tuple[list[KVPair], int]:
        where = f"{self.path}, example {line}"
        if not isinstance(record, dict) or not {"ordered_kv_records", "key", "value"} <= record.keys():
            raise ValueError(f"{where}: expected fields ordered_kv_records, key, value (a kv-retrieval release line)")
        pairs = [(str(k), str(v)) for k, v in record["ordered_kv_records"]]
        if self.num_keys is not None and len(pairs) != self.num_keys:
            raise ValueError(
                f"{where}: has {len(pairs)} pairs but num_keys={self.num_keys}; drop num_keys or pick the matching file"
            )
        gold = (str(record["key"]), str(record["value"]))
        matches = [i for i, (key, _) in enumerate(pairs) if key == gold[0]]
        if len(matches) != 1 or pairs[matches[0]] != gold:
            raise ValueError(f"{where}: the key must occur exactly once in ordered_kv_records, with its value")
        return pairs, matches[0]

    def rows(self) -> Iterator[dict[str, Any]]:
        generated = self.path is None
        compact = self.template == "pairs"
        build_prompt = build_pairs_prompt if compact else build_kv_prompt
        for index, (pairs, source) in enumerate(self.examples(), start=self.example_offset):
            n = len(pairs)
            if compact:
                pairs = pairs_form(pairs)
            key, value = pairs[source]
            short = (f"-c{self.key_chars}" if self.key_chars else "") + ("-pairs" if compact else "")
            short += f"-d{self.distinct_keys}" if self.distinct_keys else ""
            example_id = f"kv-gen-n{n}{short}-s{self.seed}-ex{index:05d}" if generated else f"kv-n{n}-ex{index:05d}"
            for position in resolve_gold_positions(self.gold_positions, n):
                prompt, spans = build_prompt(move_pair(pairs, source, position), key)
                yield {
                    "id": f"{example_id}-pos{position:03d}",
                    "example_id": example_id,
                    "task": self.name,
                    "prompt": prompt,
                    "answers": [value],
                    "gold_position": position,
                    "num_positions": n,
                    "item_spans": spans,
                    "key": key,
                    "value": value,
                    "source_index": index,
                }
