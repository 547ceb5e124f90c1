"""Accuracy per length over seeds (mean ± sample std), the in-distribution and extrapolation means, and how
predictions beyond the training lengths go wrong."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

from workflows.reversal.training import METHOD_LABEL, TASK


def per_length_accuracy(summary: Mapping, min_length: int) -> dict[int, float]:
    """Length -> accuracy of the model's baseline from a harness summary (gold_position = length - min_length)."""
    by_position = summary["results"][TASK][METHOD_LABEL]["by_position"]
    return {int(position) + min_length: float(cell["accuracy"]) for position, cell in by_position.items()}


def _mean_std(values: Sequence[float]) -> dict[str, float]:
    """Mean and sample standard deviation (ddof=1; 0 for a single value)."""
    values = [float(v) for v in values]
    return {"mean": statistics.fmean(values), "std": statistics.stdev(values) if len(values) > 1 else 0.0}


def aggregate(per_seed: Mapping[str, Mapping[int, Mapping[int, float]]], train_max: int) -> dict[str, dict]:
    """method -> seed -> length -> accuracy  =>  per method: per-length and range means ± std over seeds.

    Range means are taken per seed first (mean over the lengths in range), then
    mean ± std over seeds. In distribution: lengths <= train_max; extrapolation:
    lengths > train_max (None when no such length was tested). Every seed of a
    method must cover the same lengths.
    """
    out = {}
    for method, seeds in per_seed.items():
        if not seeds:
            raise ValueError(f"method {method!r} has no seeds to aggregate")
        lengths = sorted(next(iter(seeds.values())))
        for seed, curve in seeds.items():
            if sorted(curve) != lengths:
                raise ValueError(f"{method} seed {seed} covers lengths {sorted(curve)}, others {lengths}")
        inside = [n for n in lengths if n <= train_max]
        outside = [n for n in lengths if n > train_max]

        def range_mean(chosen, seeds=seeds):
            if not chosen:
                return None
            return {
                **_mean_std([statistics.fmean(c[n] for n in chosen) for c in seeds.values()]),
                "lengths": [chosen[0], chosen[-1]],
            }

        out[method] = {
            "seeds": sorted(seeds),
            "per_length": {
                n: {**_mean_std([c[n] for c in seeds.values()]), "by_seed": [seeds[s][n] for s in sorted(seeds)]}
                for n in lengths
            },
            "in_distribution": range_mean(inside),
            "extrapolation": range_mean(outside),
        }
    return out


def failure_modes(records: Sequence[Mapping], min_length: int, train_max: int) -> dict | None:
    """How predictions on lengths > train_max go wrong, pooled over the given harness records.

    `mean_predicted_words` and `mean_gold_words`; `stops_at_train_max`: fraction
    of predictions with exactly train_max words; `correct_prefix` / `correct_suffix`:
    mean fraction of the gold words reproduced in order before the first mistake,
    reading from the start / from the end (a model that garbles only the words
    it has to fetch from beyond the trained distance keeps a long correct
    suffix). None when no record is beyond train_max.
    """
    beyond = [r for r in records if int(r["gold_position"]) + min_length > train_max]
    if not beyond:
        return None
    predicted, gold, prefix, suffix = [], [], [], []
    for record in beyond:
        words, answer = record["prediction"].split(), record["answers"][0].split()
        predicted.append(len(words))
        gold.append(len(answer))
        prefix.append(_agreeing(words, answer) / len(answer))
        suffix.append(_agreeing(words[::-1], answer[::-1]) / len(answer))
    return {
        "n": len(beyond),
        "mean_predicted_words": statistics.fmean(predicted),
        "mean_gold_words": statistics.fmean(gold),
        "stops_at_train_max": sum(n == train_max for n in predicted) / len(predicted),
        "correct_prefix": statistics.fmean(prefix),
        "correct_suffix": statistics.fmean(suffix),
    }


def _agreeing(words: Sequence[str], answer: Sequence[str]) -> int:
    """How many leading words agree."""
    return next((i for i, (a, b) in enumerate(zip(words, answer)) if a != b), min(len(words), len(answer)))
