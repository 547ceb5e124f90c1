"""`colour_lookup`: which colour belongs to a name, with the asked line at every position of the list.

A small generated retrieval task, the shape of key-value retrieval in words: k lines "The NAME is
COLOUR.", then "Question: what colour is NAME? Answer:". One registration line makes it a task of
every command (`--tasks colour_lookup`, `--task_param colour_lookup:num_items=6`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any, ClassVar

from evaluation.tasks import Task, register_task, resolve_gold_positions
from evaluation.tasks.base import example_rng, join_items

NAMES = ("ada", "ben", "cara", "dev", "eli", "fay", "gus", "hana", "ivo", "jun", "kai", "lea", "max", "nia")
COLOURS = ("red", "blue", "green", "black", "white", "pink", "grey", "gold")


@register_task
@dataclasses.dataclass(kw_only=True)
class ColourLookupTask(Task):
    """k name-colour lines; the asked one moves through `gold_positions`."""

    name: ClassVar[str] = "colour_lookup"

    num_items: int = 6
    """Lines per prompt (at most the number of names)."""
    gold_positions: str | list[int] = "all"
    """Where the asked line goes: a grid name or 0-based positions."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 2 <= self.num_items <= len(NAMES):
            raise ValueError(f"num_items must be in [2, {len(NAMES)}], got {self.num_items}")
        if self.num_examples is None:
            raise ValueError("colour_lookup generates its examples: give num_examples")

    def rows(self) -> Iterator[dict[str, Any]]:
        positions = resolve_gold_positions(self.gold_positions, self.num_items)
        for index in self.example_indices():
            rng = example_rng(self.seed, self.name, index)
            names = rng.sample(NAMES, self.num_items)
            colours = [rng.choice(COLOURS) for _ in names]
            asked = rng.randrange(self.num_items)
            for gold in positions:
                order = [i for i in range(self.num_items) if i != asked]
                order.insert(gold, asked)
                lines = [f"The {names[i]} is {colours[i]}." for i in order]
                prompt, spans = join_items("", lines, f"\nQuestion: what colour is {names[asked]}? Answer:")
                yield {
                    "id": f"{self.name}-{index}-{gold}",
                    "example_id": f"{self.name}-{index}",
                    "task": self.name,
                    "prompt": prompt,
                    "answers": [colours[asked]],
                    "gold_position": gold,
                    "num_positions": self.num_items,
                    "item_spans": spans,
                }

    def generation_defaults(self) -> tuple[int, tuple[str, ...]]:
        return 4, ("\n", ".")
