"""The search's memory of scored genomes, below both the GA (`search.ga`) and racing (`search.racing`).

Keyed by (fitness context, canonical genome): no genome is scored twice, and a raced genome met again only pays
for the questions it has not seen. Saved in the search state (`search.ga.SearchState`).
"""

from __future__ import annotations

from typing import Any

from search.fitness import FitnessResult
from search.genome import Genome, genome_from_json


class FitnessCache:
    """Fitness by (context, canonical genome), and (racing) its per-question scores so far; counts hits and misses."""

    def __init__(self) -> None:
        self.entries: dict[tuple[str, tuple], tuple[Genome, FitnessResult]] = {}
        self.question_entries: dict[tuple[str, tuple], tuple[Genome, list[FitnessResult]]] = {}
        self.hits = 0
        self.misses = 0

    def questions(self, context: str, genome: Genome) -> list[FitnessResult]:
        """The genome's per-question results for questions 0, 1, … (a prefix of the set; [] if none)."""
        entry = self.question_entries.get((context, genome.key()))
        return [] if entry is None else entry[1]

    def extend_questions(self, context: str, genome: Genome, start: int, results: list[FitnessResult]) -> None:
        """Append the results of questions start, start + 1, …; `start` must be the count cached so far."""
        known = self.questions(context, genome)
        if start != len(known):
            raise ValueError(f"questions from {start} given for a genome with {len(known)} scored: they must follow on")
        self.question_entries[(context, genome.key())] = (genome, known + list(results))

    def questions_to_json(self) -> list[dict[str, Any]]:
        """Column-wise per genome: the questions' overall scores and each subset's."""
        out = []
        for (ctx, _), (genome, results) in self.question_entries.items():
            names = list(results[0].per_subset) if results else []
            columns = {name: [r.per_subset[name] for r in results] for name in names}
            out.append(
                {
                    "context": ctx,
                    "genome": genome.to_json(),
                    "overall": [r.overall for r in results],
                    "per_subset": columns,
                }
            )
        return out

    def load_questions(self, data: list[dict[str, Any]]) -> None:
        """Restore what `questions_to_json` wrote."""
        for item in data:
            genome, columns = genome_from_json(item["genome"]), item["per_subset"]
            results = [
                FitnessResult(float(value), {name: float(column[i]) for name, column in columns.items()})
                for i, value in enumerate(item["overall"])
            ]
            self.question_entries[(item["context"], genome.key())] = (genome, results)

    def get(self, context: str, genome: Genome) -> FitnessResult | None:
        entry = self.entries.get((context, genome.key()))
        return None if entry is None else entry[1]

    def put(self, context: str, genome: Genome, result: FitnessResult) -> None:
        self.entries[(context, genome.key())] = (genome, result)

    def to_json(self) -> list[dict[str, Any]]:
        return [{"context": ctx, "genome": g.to_json(), **r.to_json()} for (ctx, _), (g, r) in self.entries.items()]

    @classmethod
    def from_json(cls, data: list[dict[str, Any]]) -> FitnessCache:
        cache = cls()
        for item in data:
            cache.put(item["context"], genome_from_json(item["genome"]), FitnessResult.from_json(item))
        return cache
