"""The GA run one generation at a time, with a per-generation log (`NAME.log.jsonl`).

`search.ga.run` saves its state after every generation but reports only at the
end. `search_with_log` calls it with a budget one generation larger each time,
resuming its own state file, so after every generation it can append a log
line. Resuming is exact (search/ga.py), so the result equals one `run` call
with the full budget, and a crashed search resumed later ends with the same
log (apart from times).

A log line (JSON, one per generation):

    generation, best (best-so-far Eq. 7 fitness), population_best, mean (population mean),
    diversity (mean over pairs of distinct individuals of the mean |s_h − s'_h| over layers),
    distinct (distinct individuals), evaluated, cache_hits,
    questions_scored, dropped, stage_questions (racing only: new (candidate, question) pairs, candidates
    dropped early, pairs per stage), dropped_exact (racing with exact_bound: dropped by that bound),
    best_per_subset, best_genome, best_scales,
    time_s (wall time of this generation), fitness_s (of which scoring)

Lines of generations lost in a crash (state saved, log not) are rebuilt from
the state's history on resume, with null diversity, best details and times.
The log is rewritten atomically after every generation.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from repo_common.atomic import write_text_atomic
from repo_common.progress import format_duration
from search.fitness import Fitness
from search.ga import GAConfig, SearchResult, SearchState, run
from search.genome import Genome, SearchSpace


def diversity(space: SearchSpace, population: list[Genome]) -> tuple[float, int]:
    """(mean pairwise mean-absolute scale difference, number of distinct individuals) of a population."""
    distinct = list(dict.fromkeys(population))
    if len(distinct) < 2:
        return 0.0, len(distinct)
    vectors = np.array([space.scales(g) for g in distinct])
    gaps = np.abs(vectors[:, None, :] - vectors[None, :, :]).mean(axis=-1)
    upper = np.triu_indices(len(distinct), k=1)
    return float(gaps[upper].mean()), len(distinct)


def read_log(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The lines of a search log ([] when there is none)."""
    path = Path(path)
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def write_log(path: str | os.PathLike, lines: list[dict[str, Any]]) -> None:
    """Rewrite the whole log through a temporary file and `os.replace`."""
    write_text_atomic(path, "".join(json.dumps(line) + "\n" for line in lines))


def _line(space: SearchSpace, state: SearchState, entry: dict[str, Any], timing: dict[str, float] | None) -> dict:
    line = {
        "generation": entry["generation"],
        "best": entry["best"],
        "population_best": entry["population_best"],
        "mean": entry["population_mean"],
        "diversity": None,
        "distinct": None,
        "evaluated": entry["evaluated"],
        "cache_hits": entry["cache_hits"],
        "best_per_subset": None,
        "best_genome": None,
        "best_scales": None,
        "time_s": None,
        "fitness_s": None,
    }
    for key in ("questions_scored", "dropped", "dropped_exact", "stage_questions"):  # racing only (search/racing.py)
        if key in entry:
            line[key] = entry[key]
    if entry["generation"] == state.generation:  # the population on disk is this generation's
        line["diversity"], line["distinct"] = diversity(space, state.population)
        line["best_per_subset"] = state.fitness_of(state.best).per_subset
        line["best_genome"] = state.best.to_json()
        line["best_scales"] = space.scales(state.best)
        if timing is not None:
            line["time_s"], line["fitness_s"] = timing["wall_s"], timing["fitness_s"]
    return line


def search_with_log(
    space: SearchSpace,
    fitness: Fitness,
    config: GAConfig,
    state_path: Path,
    log_path: Path,
    resume: bool,
    echo: Callable[[str], None] = print,
) -> SearchResult:
    """Run the GA to `config.generations` (or early stop), logging after each generation; rank 0 only."""
    state_path, log_path = Path(state_path), Path(log_path)
    resuming = resume and state_path.exists()
    generation = SearchState.load(state_path).generation if resuming else 0
    lines = [line for line in read_log(log_path) if line["generation"] <= generation] if resuming else []
    first = True
    began, ran = time.perf_counter(), 0  # this process's generations, for the ETA (a resume starts anew)
    while True:
        start = time.perf_counter()
        result = run(
            space,
            fitness,
            dataclasses.replace(config, generations=generation),
            context=getattr(fitness, "context", ""),
            state_path=state_path,
            resume=resuming or not first,
        )
        first = False
        state = SearchState.load(state_path)
        timing = {**result.timing, "wall_s": time.perf_counter() - start}
        logged = {line["generation"] for line in lines}
        ran += 1
        elapsed = time.perf_counter() - began
        eta = elapsed / ran * max(0, config.generations - state.generation)
        for entry in state.history:
            if entry["generation"] not in logged:
                lines.append(_line(space, state, entry, timing))
                _echo(echo, lines[-1], config.generations, elapsed, eta)
        write_log(log_path, lines)
        stale = config.patience is not None and state.stale >= config.patience
        if state.generation >= config.generations or stale:
            return dataclasses.replace(result, stopped_early=state.generation < config.generations)
        generation = state.generation + 1


def _echo(echo: Callable[[str], None], line: dict[str, Any], total: int, elapsed: float, eta: float) -> None:
    """One line per generation, with the run's elapsed time and an ETA (at most: patience may stop it early)."""
    parts = [f"generation {line['generation']}/{total}", f"best {line['best']:.4f}", f"mean {line['mean']:.4f}"]
    if line["diversity"] is not None:
        parts.append(f"diversity {line['diversity']:.3f}")
    parts.append(f"scored {line['evaluated']}")
    if "dropped" in line:
        parts.append(f"dropped {line['dropped']} ({line['questions_scored']} questions scored)")
    if line["time_s"] is not None:
        parts.append(f"{line['time_s']:.1f} s")
    parts += [f"elapsed {format_duration(elapsed)}", f"eta {format_duration(eta)}"]
    echo("  ".join(parts))
