"""RULER-style synthetic retrieval (Hsieh et al., 2024): needles in a haystack and variable tracking.

A haystack of filler sentences is grown until the *whole prompt* reaches a
target length in tokens of the model's own tokenizer (so a 4K task is 4K
tokens for that model, as in RULER), and sentences ("needles") are inserted at
chosen depths. One needle, the *anchor*, moves through a grid of depths
(0 = right after the instruction, 100 = right before the question); every
other needle keeps its seeded depth, so the depths of one example are compared
on the same haystack and needles (a paired design).

Variants (RULER's names): S = one key, one value; MK = several keys, one asked;
MV = one key with several values, all asked; MQ = several keys, several asked;
VT = chains `VAR B = VAR A` starting from a number, every variable of the first
chain asked. Rows: `gold_position` = index of the anchor's depth in the grid,
`num_positions` = size of the grid, `item_spans` = the haystack cut into one
segment per depth (a unit belongs to the nearest grid depth), so the anchor
lies in segment `gold_position`.

Score (RULER's `string_match_all`): the fraction of expected values found in
the prediction, case-insensitively; `score_mode="all"` gives 1 only when all are found.
The needle sentence and key/value formats follow RULER; the instructions, the
questions and the filler texts are this project's own wording.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import string
from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from evaluation.tasks.base import GoldPositions, Task, example_rng, resolve_gold_positions
from evaluation.tasks.kv_retrieval import random_uuid4
from repo_common.model_directory import check_tokenizer_files

#: Generic filler of the "noise" haystack: this block repeated, one block a line (RULER's noise haystack idea).
NOISE_BLOCK = (
    "The river runs on toward the sea. The hills stay quiet in the evening. The old clock keeps ticking. "
    "One step follows another. Round and round it goes."
)
#: Essay-like filler of the "essay" haystack (written for this project), cycled from a seeded offset.
ESSAY_SENTENCES = (
    "Most skills are learned slowly, and the slowness is easy to mistake for failure.",
    (
        "A beginner sees the distance between what they can do and what they admire, and that distance feels like a "
        "verdict."
    ),
    "It is not a verdict; it is simply the size of the work ahead.",
    "People who get good at something are rarely the ones who started with talent.",
    "They are the ones who kept going long enough for practice to compound.",
    "Practice compounds because each small improvement makes the next one easier to notice.",
    "A carpenter who has planed many boards sees a warped edge that a novice would miss.",
    "Seeing the flaw is half of fixing it.",
    "This is why feedback matters more than effort alone.",
    "Effort without feedback repeats the same mistakes with more conviction.",
    "The best teachers do not give answers so much as they sharpen attention.",
    "They point at the place where the student stopped looking.",
    "Much of expertise is knowing where to look.",
    "Another part is knowing what to ignore.",
    "A good editor cuts sentences that are true but unnecessary.",
    "A good engineer removes parts that work but add nothing.",
    "Simplicity is usually the result of many decisions, not the absence of them.",
    "It is tempting to believe that complicated problems need complicated tools.",
    "Often the opposite holds: a plain method, applied patiently, outlasts a clever one.",
    "Clever methods tend to break in ways their authors did not foresee.",
    "Plain methods break in ways anyone can understand and repair.",
    "There is also the question of taste.",
    "Taste is the ability to tell better from worse before you can explain why.",
    "It grows from exposure to good work and from honest comparison with your own.",
    "Comparison hurts at first, which is why many people avoid it.",
    "Yet avoiding it freezes taste where it is.",
    "Curiosity helps more than discipline over long stretches of time.",
    "Discipline gets you through a bad week; curiosity gets you through a decade.",
    "When the work itself is interesting, showing up stops being a chore.",
    "So it is worth choosing problems that you would think about even if nobody asked.",
    "Such problems have a way of teaching you things no course would cover.",
    "In the end, the craft changes the person who practises it.",
    "Patience, attention and a certain calm about mistakes are its quiet rewards.",
)
HAYSTACKS: dict[str, tuple[tuple[str, ...], str]] = {"noise": ((NOISE_BLOCK,), "\n"), "essay": (ESSAY_SENTENCES, " ")}
#: RULER's needle sentence.
NEEDLE = "One of the special magic {kind} for {key} is: {value}."
NEEDLE_TYPES = ("numbers", "words", "uuids")
_ADJECTIVES_TEXT = (
    "amber brave calm dusty eager fancy gentle hollow icy jolly keen lively mellow noble odd proud quiet "
    "rapid shiny tidy urban vivid wary young zesty bitter clever dim fuzzy grand"
)
_ADJECTIVES = _ADJECTIVES_TEXT.split()
_NOUNS_TEXT = (
    "anchor badge cactus dolphin engine falcon glacier harbor island jacket kettle lantern meadow needle "
    "orchard pebble quarry ribbon saddle tunnel umbrella violin walnut yacht zipper beacon candle drum "
    "feather goblet"
)
_NOUNS = _NOUNS_TEXT.split()


def resolve_tokenizer(spec: Any):
    """A tokenizer from a spec: a tokenizer object as is, 'byte' (the harness's byte tokenizer) or a local HF dir."""
    if spec is None:
        raise ValueError(
            "this task measures lengths in tokens: pass tokenizer= the model's tokenizer (an object), a local HF "
            "model/tokenizer directory, or 'byte' for the tiny default's byte tokenizer"
        )
    if isinstance(spec, str | Path):
        if str(spec) == "byte":
            from repo_train.byte_tokenizer import byte_tokenizer  # heavy: transformers, only for tokenizer='byte'

            return byte_tokenizer()
        if not Path(spec).is_dir():
            raise FileNotFoundError(f"tokenizer directory {str(spec)!r} not found; pass a local HF directory or 'byte'")
        check_tokenizer_files(spec)  # garbage JSON or the directory's own code: one line naming the file
        from transformers import AutoTokenizer  # heavy: transformers, only for a tokenizer directory

        return AutoTokenizer.from_pretrained(spec, local_files_only=True)
    if not callable(spec):
        raise TypeError(f"tokenizer must be a tokenizer object, a directory or 'byte', got {type(spec).__name__}")
    return spec


def count_tokens(tokenizer, text: str, special_tokens: bool = True) -> int:
    """Tokens of `text` as the harness feeds it (special tokens such as BOS included by default)."""
    return len(tokenizer(text, add_special_tokens=special_tokens)["input_ids"])


def largest_fitting(measure: Callable[[int], int], limit: int, guess: int) -> int:
    """Largest n >= 0 with measure(n) <= limit for a non-decreasing `measure`; -1 when even n = 0 is too long.

    Gallops from `guess` then bisects, so a good guess costs a few calls of `measure`.
    """
    if measure(0) > limit:
        return -1
    lo, hi = 0, None  # measure(lo) fits, measure(hi) does not
    step, probe = max(1, guess // 32), max(1, guess)
    if measure(probe) <= limit:
        lo = probe
        while hi is None:
            if measure(lo + step) <= limit:
                lo, step = lo + step, step * 2
            else:
                hi = lo + step
    else:
        hi = probe
        while hi - step > 0 and measure(hi - step) > limit:
            hi, step = hi - step, step * 2
        lo = max(0, hi - step)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if measure(mid) <= limit else (lo, mid)
    return lo


def depth_grid(depths: int | str | Sequence[float]) -> list[float]:
    """Depth percentages: an int k gives k evenly spaced depths from 0 to 100 (k = 1: the middle).

    A string is a comma-separated list ('0,50,100', as a CLI --task_param gives it).
    """
    if isinstance(depths, str):
        try:
            depths = [float(x) for x in depths.split(",") if x.strip()]
        except ValueError:
            raise ValueError(f"depths {depths!r} is not a comma-separated list of percentages") from None
    if isinstance(depths, int) and not isinstance(depths, bool):
        if depths < 1:
            raise ValueError(f"depths must be >= 1 (number of evenly spaced depths), got {depths}")
        return [50.0] if depths == 1 else [100.0 * i / (depths - 1) for i in range(depths)]
    grid = sorted({float(d) for d in depths})
    if not grid or any(not 0 <= d <= 100 for d in grid):
        raise ValueError(f"depths must be an int or a non-empty list of percentages in [0, 100], got {depths!r}")
    return grid


@dataclasses.dataclass(frozen=True)
class Insert:
    """A sentence placed into the filler at `depth` percent; `order` breaks ties (0 = the anchor)."""

    text: str
    depth: float
    order: int


@dataclasses.dataclass(frozen=True)
class Layout:
    """Filler and inserts joined into one text, with each insert's span and each bucket's span."""

    text: str
    insert_spans: dict[int, tuple[int, int]]
    bucket_spans: list[list[int]]


def lay_out(filler: Sequence[str], inserts: Sequence[Insert], separator: str, edges: Sequence[float]) -> Layout:
    """Insert each sentence before filler unit floor(depth·n/100 + 1/2); cut the result into buckets.

    A filler unit i has depth (i + 1/2)/n·100, an insert its own depth (by rank when
    there is no filler); bucket b holds the units whose depth lies in [edges[b-1], edges[b]).
    Unit depths never decrease along the text, so each bucket is one contiguous span.
    """
    n = len(filler)
    slot = {ins.order: min(n, math.floor(ins.depth * n / 100 + 0.5)) for ins in inserts}
    ordered = sorted(inserts, key=lambda ins: (slot[ins.order], ins.depth, ins.order))
    units: list[tuple[float, str, int | None]] = []
    cursor = 0
    for i in range(n + 1):
        while cursor < len(ordered) and slot[ordered[cursor].order] == i:
            ins = ordered[cursor]
            units.append((ins.depth if n else 100 * (cursor + 0.5) / len(ordered), ins.text, ins.order))
            cursor += 1
        if i < n:
            units.append((100 * (i + 0.5) / n, filler[i], None))
    pieces, insert_spans, buckets = [], {}, [[] for _ in range(len(edges) + 1)]
    offset = 0
    for index, (depth, text, order) in enumerate(units):
        if index:
            offset += len(separator)
        span = (offset, offset + len(text))
        if order is not None:
            insert_spans[order] = span
        buckets[min(bisect_right(edges, depth), len(edges))].append(span)
        pieces.append(text)
        offset += len(text)
    spans: list[list[int]] = []
    for b, members in enumerate(buckets):
        if members:
            spans.append([members[0][0], members[-1][1]])
        else:  # empty bucket: the empty span where the next non-empty bucket starts
            later = [m[0][0] for m in buckets[b + 1 :] if m]
            spans.append([later[0], later[0]] if later else [offset, offset])
    return Layout(separator.join(pieces), insert_spans, spans)


def filler_units(haystack: str, count: int, offset: int) -> list[str]:
    """`count` filler units of a haystack, cycling from `offset`."""
    units, _ = HAYSTACKS[haystack]
    return [units[(offset + i) % len(units)] for i in range(count)]


def string_match_all(prediction: str, answers: Sequence[str]) -> float:
    """RULER's string_match_all for one prediction: the share of answers found in it, case-insensitively."""
    if isinstance(answers, str) or not answers:
        raise ValueError(f"answers must be a non-empty list of strings, got {answers!r}")
    lowered = prediction.lower()
    return sum(answer.lower() in lowered for answer in answers) / len(answers)


def random_needle(kind: str, rng) -> str:
    """A RULER-style key or value: a 7-digit number, an adjective-noun pair or a UUID4."""
    if kind == "numbers":
        return str(rng.randint(10**6, 10**7 - 1))
    if kind == "words":
        return f"{rng.choice(_ADJECTIVES)}-{rng.choice(_NOUNS)}"
    return random_uuid4(rng)


def distinct(make: Callable[[], str], count: int, taken: set[str]) -> list[str]:
    """`count` new strings from `make`, none already in `taken` (which is updated)."""
    out: list[str] = []
    for _ in range(1000 * count + 100):
        if len(out) == count:
            return out
        value = make()
        if value not in taken:
            taken.add(value)
            out.append(value)
    raise ValueError(f"could not draw {count} distinct values; use a larger key/value type (numbers or uuids)")


@dataclasses.dataclass
class HaystackExample:
    """One generated example: prompt pieces, answers, and where its sentences go for a given anchor depth."""

    header: str
    footer: str
    answers: list[str]
    query: str
    place: Callable[[float], list[Insert]]


@dataclasses.dataclass(kw_only=True)
class HaystackTask(Task):
    """Base of the RULER tasks: tokenizer-measured haystack, anchor depth grid, RULER scoring."""

    metric_name = "ruler_string_match_all"
    max_new_tokens = 128  # RULER's tokens_to_generate for NIAH

    target_length: int = 4096
    """Prompt length in tokens (special tokens included). RULER counts its answer budget in its max length:
    pass L - max_new_tokens to match RULER's length L."""
    tokenizer: Any = None
    """The model's tokenizer (object), a local HF directory, or 'byte' (the tiny default's tokenizer)."""
    haystack: str = "essay"
    """Filler: 'essay' (built-in essay sentences) or 'noise' (a repeated block of generic sentences)."""
    depths: int | list[float] | str = 5
    """Anchor depths: an int k (k evenly spaced from 0 to 100), a list of percentages or '0,50,100'."""
    gold_positions: GoldPositions = "all"
    """Which depths of the grid to emit (indices): 'all', 'ends-20-50-80', 'quartiles', an int or a list."""
    score_mode: str = "fraction"
    """'fraction' (share of expected values found, RULER) or 'all' (1 only when every value is found)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.num_examples is None:
            raise ValueError(f"{self.name} generates its examples: pass num_examples= (how many)")
        if isinstance(self.target_length, bool) or not isinstance(self.target_length, int) or self.target_length < 1:
            raise ValueError(f"target_length must be a positive int (tokens), got {self.target_length!r}")
        if self.haystack not in HAYSTACKS:
            raise ValueError(f"unknown haystack {self.haystack!r}; choose one of {sorted(HAYSTACKS)}")
        if self.score_mode not in ("fraction", "all"):
            raise ValueError(f"score_mode must be 'fraction' or 'all', got {self.score_mode!r}")
        resolve_gold_positions(self.gold_positions, len(depth_grid(self.depths)))
        self._check()

    def _check(self) -> None:
        """Variant-specific validation."""

    def _example(self, index: int, rng) -> HaystackExample:
        raise NotImplementedError

    def generation_defaults(self) -> tuple[int, tuple[str, ...]]:
        """RULER's answer budget, no stop string (RULER has none)."""
        return self.max_new_tokens, ()

    def score(self, prediction: str, answers: Sequence[str]) -> float:
        found = string_match_all(prediction, answers)
        return found if self.score_mode == "fraction" else float(found == 1.0)

    def extra_features(self) -> dict[str, Any]:
        return {
            "depth_percent": "float64",
            "target_length": "int64",
            "prompt_tokens": "int64",
            "query": "string",
            "source_index": "int64",
        }

    def rows(self) -> Iterator[dict[str, Any]]:
        tokenizer = resolve_tokenizer(self.tokenizer)
        grid = depth_grid(self.depths)
        edges = [(a + b) / 2 for a, b in itertools.pairwise(grid)]
        positions = resolve_gold_positions(self.gold_positions, len(grid))
        units, separator = HAYSTACKS[self.haystack]
        per_unit = count_tokens(tokenizer, separator.join(units) + separator, False) / len(units)
        for index in self.example_indices():
            rng = example_rng(self.seed, self.name, self.target_length, index)
            example = self._example(index, rng)
            offset = rng.randrange(len(units))

            def build(n: int, depth: float, example=example, offset=offset):
                layout = lay_out(filler_units(self.haystack, n, offset), example.place(depth), separator, edges)
                prompt = example.header + layout.text + example.footer
                return prompt, layout, count_tokens(tokenizer, prompt)

            fixed = build(0, grid[positions[0]])[2]
            n = largest_fitting(
                lambda k: build(k, grid[positions[0]])[2], self.target_length, self._guess(fixed, per_unit)
            )
            built = {}
            while n >= 1:  # every depth must fit with the same haystack (tokenisation may differ by a token)
                built = {p: build(n, grid[p]) for p in positions}
                if all(tokens <= self.target_length for _, _, tokens in built.values()):
                    break
                n -= 1
            if n < 1:
                raise ValueError(
                    f"target_length={self.target_length} leaves no room for filler: the instruction, needles and "
                    f"question alone take {fixed} tokens; raise target_length"
                )
            example_id = f"{self.name}-L{self.target_length}-s{self.seed}-ex{index:05d}"
            for position in positions:
                prompt, layout, tokens = built[position]
                shift = len(example.header)
                yield {
                    "id": f"{example_id}-pos{position:03d}",
                    "example_id": example_id,
                    "task": self.name,
                    "prompt": prompt,
                    "answers": example.answers,
                    "gold_position": position,
                    "num_positions": len(grid),
                    "item_spans": [[s + shift, e + shift] for s, e in layout.bucket_spans],
                    "depth_percent": grid[position],
                    "target_length": self.target_length,
                    "prompt_tokens": tokens,
                    "query": example.query,
                    "source_index": index,
                }

    def _guess(self, fixed: int, per_unit: float) -> int:
        return max(1, int((self.target_length - fixed) / max(per_unit, 1e-9)))


def join_queries(queries: Sequence[str]) -> str:
    """'a', 'a and b', 'a, b, and c'."""
    if len(queries) <= 2:
        return " and ".join(queries)
    return ", ".join(queries[:-1]) + ", and " + queries[-1]


def niah_prompt_parts(kind: str, query: str, plural: bool) -> tuple[str, str]:
    """The text before the haystack and after it (ending in an answer prefix, no trailing space)."""
    if plural:
        header = (
            f"Some special magic {kind} are hidden in the text below. Memorize them; I will ask about them later.\n"
        )
        question = f"\nWhich special magic {kind} for {query} does the text above mention? "
        return header, question + f"The special magic {kind} for {query} mentioned in the text above are"
    one = kind[:-1]
    header = f"A special magic {one} is hidden in the text below. Memorize it; I will ask about it later.\n"
    question = f"\nWhich special magic {one} for {query} does the text above mention? "
    return header, question + f"The special magic {one} for {query} mentioned in the text above is"


@dataclasses.dataclass(kw_only=True)
class RulerNIAHTask(HaystackTask):
    """NIAH with any number of keys, values per key and queried keys (defaults: the single-needle variant)."""

    name = "ruler_niah_single"

    num_keys: int = 1
    """Keys with a needle each (MK: 4); distractor keys are never asked."""
    num_values: int = 1
    """Values (needles) per key (MV: 4); all values of an asked key are expected."""
    num_queries: int = 1
    """Keys asked (MQ: 4); at most num_keys."""
    key_type: str = "words"
    """'words' (adjective-noun), 'numbers' (7 digits) or 'uuids'."""
    value_type: str = "numbers"
    """'numbers', 'words' or 'uuids'; also the noun of the prompt ('special magic numbers')."""

    def _check(self) -> None:
        for field in ("num_keys", "num_values", "num_queries"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{field} must be an int >= 1, got {value!r}")
        if self.num_queries > self.num_keys:
            raise ValueError(f"num_queries={self.num_queries} > num_keys={self.num_keys}; ask at most every key")
        for field in ("key_type", "value_type"):
            if getattr(self, field) not in NEEDLE_TYPES:
                raise ValueError(f"{field} must be one of {list(NEEDLE_TYPES)}, got {getattr(self, field)!r}")

    def _example(self, index: int, rng) -> HaystackExample:
        taken: set[str] = set()
        keys = distinct(lambda: random_needle(self.key_type, rng), self.num_keys, taken)
        values = [distinct(lambda: random_needle(self.value_type, rng), self.num_values, taken) for _ in keys]
        # keys[0] is asked first and its first value is the anchor; the other needles keep seeded depths
        needles = [NEEDLE.format(kind=self.value_type, key=k, value=v) for k, vs in zip(keys, values) for v in vs]
        others = [rng.uniform(0, 100) for _ in needles[1:]]
        query = join_queries(keys[: self.num_queries])
        header, footer = niah_prompt_parts(self.value_type, query, self.num_values * self.num_queries > 1)

        def place(depth: float) -> list[Insert]:
            return [Insert(text, d, i) for i, (text, d) in enumerate(zip(needles, [depth, *others]))]

        answers = [v for vs in values[: self.num_queries] for v in vs]
        return HaystackExample(header, footer, answers, query, place)


@dataclasses.dataclass(kw_only=True)
class RulerMultiKeyTask(RulerNIAHTask):
    """Identical to RulerNIAHTask except 4 keys by default (one asked): RULER's MK."""

    name = "ruler_niah_multikey"
    num_keys: int = 4


@dataclasses.dataclass(kw_only=True)
class RulerMultiValueTask(RulerNIAHTask):
    """Identical to RulerNIAHTask except 4 values for the one key by default: RULER's MV."""

    name = "ruler_niah_multivalue"
    num_values: int = 4


@dataclasses.dataclass(kw_only=True)
class RulerMultiQueryTask(RulerNIAHTask):
    """Identical to RulerNIAHTask except 4 keys, all 4 asked, by default: RULER's MQ."""

    name = "ruler_niah_multiquery"
    num_keys: int = 4
    num_queries: int = 4


def vt_prompt_parts(value: str, num_variables: int) -> tuple[str, str]:
    """Variable tracking's text before and after the haystack (the answer prefix ends in ': ')."""
    header = "Follow every chain of variable assignments hidden in the text below.\n\n"
    footer = (
        f"\nQuestion: Which variables are assigned the value {value} in the text above? Answer: Following the "
        f"chains in the text above, {num_variables} variables hold the value {value}. They are: "
    )
    return header, footer


@dataclasses.dataclass(kw_only=True)
class RulerVariableTrackingTask(HaystackTask):
    """RULER's VT: the first chain's opening assignment is the anchor; its later hops follow at seeded depths."""

    name = "ruler_vt"
    max_new_tokens = 30  # RULER's tokens_to_generate for VT

    haystack: str = "noise"
    num_chains: int = 1
    """Chains of assignments; only the first is asked, the others distract."""
    num_hops: int = 4
    """Assignments after the first in each chain (a chain names num_hops + 1 variables)."""

    def _check(self) -> None:
        for field in ("num_chains", "num_hops"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{field} must be an int >= 1, got {value!r}")

    def _example(self, index: int, rng) -> HaystackExample:
        taken: set[str] = set()
        names = distinct(
            lambda: "".join(rng.choices(string.ascii_uppercase, k=5)), (self.num_hops + 1) * self.num_chains, taken
        )
        starts = distinct(lambda: str(rng.randint(10000, 99999)), self.num_chains, set())
        chains = []
        for c in range(self.num_chains):
            chain = names[c * (self.num_hops + 1) : (c + 1) * (self.num_hops + 1)]
            lines = [f"VAR {chain[0]} = {starts[c]}."] + [f"VAR {b} = VAR {a}." for a, b in itertools.pairwise(chain)]
            chains.append((chain, lines))
        hops = sorted(rng.random() for _ in range(self.num_hops))  # fractions of the way from the anchor to the end
        other = [sorted(rng.uniform(0, 100) for _ in lines) for _, lines in chains[1:]]

        def place(depth: float) -> list[Insert]:
            first = [depth] + [depth + u * (100 - depth) for u in hops]
            inserts = [Insert(text, d, i) for i, (text, d) in enumerate(zip(chains[0][1], first))]
            for c, ((_, lines), depths) in enumerate(zip(chains[1:], other), start=1):
                base = c * (self.num_hops + 1)
                inserts += [Insert(text, d, base + i) for i, (text, d) in enumerate(zip(lines, depths))]
            return inserts

        header, footer = vt_prompt_parts(starts[0], self.num_hops + 1)
        return HaystackExample(header, footer, list(chains[0][0]), starts[0], place)
