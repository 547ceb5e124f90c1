"""Cross-chunk reasoning: bAbI QA2 ("two supporting facts") stories hidden in distractor text, as in BABILong.

A story is a few bAbI-style facts about people moving and taking objects; the
question "Where is the Y?" needs two of them: "X picked up the Y." and the
later "X went to the Z." (answer: Z). As in BABILong (Kuratov et al., 2024),
the story's sentences are spread, in order, through distractor text grown to
a target length in tokens of the model's tokenizer (0 = the bare story).
BABILong's distractors are PG-19 books; here they are the built-in essay
sentences of `evaluation.tasks.ruler`, which mention no person, place or object
of the stories.

Placement (paired across buckets): the context is cut into `num_positions`
equal depth buckets; for bucket b the first supporting fact sits at the
bucket's centre, (b + 1/2)/k·100 percent, the facts before it at seeded
fractions of [0, that depth] and the facts after it at seeded fractions of
[that depth, 100]. `gold_position` = b. With no distractor text there is one row
per example and `gold_position` is the bucket of the first supporting fact's
rank among the story's sentences. `item_spans` are the k buckets.

Score (BABILong's rule for QA2): 1 when the answer location appears as a word
in the prediction and no other location of the task does.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator, Sequence
from typing import Any

from evaluation.tasks.base import GoldPositions, Task, example_rng, resolve_gold_positions
from evaluation.tasks.ruler import (
    ESSAY_SENTENCES,
    Insert,
    count_tokens,
    filler_units,
    largest_fitting,
    lay_out,
    resolve_tokenizer,
)

ACTORS = ("Mary", "John", "Daniel", "Sandra", "Alice", "Peter")
LOCATIONS = ("bathroom", "hallway", "garden", "office", "bedroom", "kitchen")
OBJECTS = ("football", "apple", "milk", "notebook")
MOVE_VERBS = ("went to", "moved to", "journeyed to", "travelled to")
TAKE_VERBS = ("picked up", "grabbed", "got", "took")
#: BABILong's default grid of distractor lengths (tokens); 0 = the story alone.
DEFAULT_LENGTHS = (0, 1000, 2000, 4000, 8000)

INSTRUCTION = (
    "Below is a text in which facts about people and objects are hidden. Use only those facts to answer the "
    "question after it. Whoever takes an object carries it along, so the object is wherever that person went last. "
    "Answer with one word: the location.\n\n<context>\n"
)


def build_babi_prompt(context: str, obj: str) -> str:
    """The instruction, the context between tags, and the question (ending in 'Answer:')."""
    return f"{INSTRUCTION}{context}\n</context>\n\nQuestion: Where is the {obj}?\nAnswer:"


@dataclasses.dataclass(frozen=True)
class Story:
    """A QA2 story: its sentences in order, the index of each supporting fact, the object and its location."""

    facts: tuple[str, ...]
    first_support: int
    second_support: int
    obj: str
    answer: str


def make_story(rng, num_facts: int) -> Story:
    """A story of `num_facts` sentences whose answer needs the pickup fact and the holder's last move.

    The holder may move before the pickup (to another place), never after the final move; other people
    move about and take other objects, so no other fact touches the asked object.
    """
    if num_facts < 2:
        raise ValueError(f"a QA2 story needs at least its 2 supporting facts, got num_facts={num_facts}")
    holder, *others = rng.sample(ACTORS, len(ACTORS))
    obj, *other_objects = rng.sample(OBJECTS, len(OBJECTS))
    answer = rng.choice(LOCATIONS)
    # distractor facts go before the pickup (0), between the two supporting facts (1) or after the move (2)
    slots = sorted(rng.choice((0, 1, 2)) for _ in range(num_facts - 2))
    facts: list[str] = []
    first = second = -1
    free_objects = list(other_objects)
    for phase in (0, 1, 2):
        if phase == 1:
            first = len(facts)
            facts.append(f"{holder} {rng.choice(TAKE_VERBS)} the {obj}.")
        if phase == 2:
            second = len(facts)
            facts.append(f"{holder} {rng.choice(MOVE_VERBS)} the {answer}.")
        for _ in range(slots.count(phase)):
            if phase == 0 and rng.random() < 0.3:
                place = rng.choice([loc for loc in LOCATIONS if loc != answer])
                facts.append(f"{holder} {rng.choice(MOVE_VERBS)} the {place}.")
            elif free_objects and rng.random() < 0.25:
                facts.append(f"{rng.choice(others)} {rng.choice(TAKE_VERBS)} the {free_objects.pop()}.")
            else:
                facts.append(f"{rng.choice(others)} {rng.choice(MOVE_VERBS)} the {rng.choice(LOCATIONS)}.")
    return Story(tuple(facts), first, second, obj, answer)


def location_match(prediction: str, answers: Sequence[str]) -> float:
    """1.0 when a gold location occurs as a word in the prediction and no other known location does."""
    if isinstance(answers, str) or not answers:
        raise ValueError(f"answers must be a non-empty list of strings, got {answers!r}")
    words = set(re.findall(r"[a-z]+", prediction.lower()))
    gold = {a.lower() for a in answers}
    wrong = (set(LOCATIONS) - gold) & words
    return float(bool(gold & words) and not wrong)


def _lengths(spec: int | str | Sequence[int]) -> list[int]:
    """Sorted distinct lengths from an int, a list, or a comma-separated string ('0,1000', from the CLI)."""
    if isinstance(spec, str):
        try:
            spec = [int(x) for x in spec.split(",") if x.strip()]
        except ValueError:
            raise ValueError(f"lengths {spec!r} is not a comma-separated list of token counts") from None
    items = [spec] if isinstance(spec, int) else list(spec)
    if not items or any(isinstance(n, bool) or not isinstance(n, int) or n < 0 for n in items):
        raise ValueError(f"lengths must be an int >= 0 or a non-empty list of them (tokens), got {spec!r}")
    return sorted(set(items))


@dataclasses.dataclass(kw_only=True)
class BabiTask(Task):
    """bAbI QA2 stories in tokenizer-measured distractor text, the first supporting fact in each depth bucket."""

    name = "babi_qa2"
    metric_name = "babi_location_match"

    tokenizer: Any = None
    """The model's tokenizer (object), a local HF directory, or 'byte'; needed unless lengths is only 0."""
    lengths: int | list[int] | str = dataclasses.field(default_factory=lambda: list(DEFAULT_LENGTHS))
    """Context lengths in tokens (story + distractors, no special tokens), a list or '0,1000'; 0 = story alone."""
    num_positions: int = 5
    """Depth buckets of the context (k)."""
    gold_positions: GoldPositions = "all"
    """Buckets of the first supporting fact to emit: 'all', 'ends-20-50-80', 'quartiles', an int or a list."""
    num_facts: int = 6
    """Sentences per story, the two supporting facts included."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.num_examples is None:
            raise ValueError("babi_qa2 generates its examples: pass num_examples= (how many stories)")
        _lengths(self.lengths)
        if isinstance(self.num_positions, bool) or not isinstance(self.num_positions, int) or self.num_positions < 1:
            raise ValueError(f"num_positions must be an int >= 1 (depth buckets), got {self.num_positions!r}")
        resolve_gold_positions(self.gold_positions, self.num_positions)
        if isinstance(self.num_facts, bool) or not isinstance(self.num_facts, int) or self.num_facts < 2:
            raise ValueError(f"num_facts must be an int >= 2 (the two supporting facts), got {self.num_facts!r}")

    def generation_defaults(self) -> tuple[int, tuple[str, ...]]:
        """A one-word answer: a few tokens, first line only."""
        return 16, ("\n",)

    def score(self, prediction: str, answers: Sequence[str]) -> float:
        return location_match(prediction, answers)

    def extra_features(self) -> dict[str, Any]:
        return {
            "length": "int64",
            "context_tokens": "int64",
            "question": "string",
            "facts": ["string"],
            "source_index": "int64",
        }

    def rows(self) -> Iterator[dict[str, Any]]:
        lengths = _lengths(self.lengths)
        tokenizer = resolve_tokenizer(self.tokenizer) if any(lengths) else None
        k = self.num_positions
        edges = [100 * b / k for b in range(1, k)]
        buckets = resolve_gold_positions(self.gold_positions, k)
        header = len(INSTRUCTION)
        for index in self.example_indices():
            rng = example_rng(self.seed, self.name, index)
            story = make_story(rng, self.num_facts)
            f = story.first_support
            fractions = [rng.random() for _ in story.facts]  # fixed per story: paired across buckets and lengths
            offset = rng.randrange(len(ESSAY_SENTENCES))

            def place(depth: float, story=story, fractions=fractions, f=f) -> list[Insert]:
                before = sorted(fractions[:f])
                after = sorted(fractions[f + 1 :])
                depths = [depth * u for u in before] + [depth] + [depth + u * (100 - depth) for u in after]
                return [Insert(text, d, i) for i, (text, d) in enumerate(zip(story.facts, depths))]

            for length in lengths:
                example_id = f"{self.name}-L{length}-s{self.seed}-ex{index:05d}"
                if length == 0:
                    layout = lay_out([], place(0.0), " ", edges)
                    bucket = min(int(k * (f + 0.5) / len(story.facts)), k - 1)
                    plan = [(bucket, layout)]
                else:
                    plan = self._fit(tokenizer, length, place, offset, edges, buckets)
                for bucket, layout in plan:
                    prompt = build_babi_prompt(layout.text, story.obj)
                    yield {
                        "id": f"{example_id}-pos{bucket:03d}",
                        "example_id": example_id,
                        "task": self.name,
                        "prompt": prompt,
                        "answers": [story.answer],
                        "gold_position": bucket,
                        "num_positions": k,
                        "item_spans": [[s + header, e + header] for s, e in layout.bucket_spans],
                        "length": length,
                        "context_tokens": count_tokens(tokenizer, layout.text, False) if tokenizer else -1,
                        "question": f"Where is the {story.obj}?",
                        "facts": list(story.facts),
                        "source_index": index,
                    }

    def _fit(self, tokenizer, length: int, place, offset: int, edges: list[float], buckets: list[int]):
        """The most distractor sentences for which every bucket's context stays within `length` tokens."""
        k = self.num_positions
        centre = {b: 100 * (b + 0.5) / k for b in buckets}

        def layout(n: int, b: int):
            return lay_out(filler_units("essay", n, offset), place(centre[b]), " ", edges)

        def tokens(n: int, b: int) -> int:
            return count_tokens(tokenizer, layout(n, b).text, False)

        per_unit = count_tokens(tokenizer, " ".join(ESSAY_SENTENCES) + " ", False) / len(ESSAY_SENTENCES)
        story_tokens = tokens(0, buckets[0])
        if story_tokens > length:
            raise ValueError(
                f"length {length} is shorter than the story itself ({story_tokens} tokens); use lengths of 0 "
                f"(story alone) or at least {story_tokens}"
            )
        n = largest_fitting(lambda m: tokens(m, buckets[0]), length, int((length - story_tokens) / per_unit))
        while n > 0 and any(tokens(n, b) > length for b in buckets[1:]):
            n -= 1
        if n == 0:
            raise ValueError(
                f"length {length} leaves no room for distractor text after the story ({story_tokens} tokens); "
                "use 0 (story alone) or a longer length"
            )
        return [(b, layout(n, b)) for b in buckets]
