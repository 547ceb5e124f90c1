"""Whether a search's result beats the model it started from: one record for the scale file, one sentence.

A search always writes its best candidate's scale file, also when that candidate scores no better than the
unscaled model (every s_h = 1): a reader who applies it then gets a number worse than doing nothing, so the
search says so in its log (stderr), in the scale file (`search.outcome`) and in `search show`.

"Beats" means strictly higher (both scores are maximised: an accuracy, or a mean log-probability), on the
held-out check when the search ran one (`lpes` against `baseline` on questions it did not use: the number
that predicts an evaluation), else on the search set (the best candidate's fitness against the unscaled
model's, which flatters the search). Two more things make a result uninformative, and are said too:

- every candidate of every generation's population scored the same (often 0: a task the model never
  answers right), so the fitness could not tell them apart and selection had nothing to go on;
- a curve search whose best individual is still its start (`SearchSpace.initial`: the same scale on every
  layer), which is PI at that scale, not a per-layer result.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def every_candidate_scored(history: Sequence[Mapping[str, Any]]) -> float | None:
    """The one fitness every generation's whole population had (best = mean throughout); None if they differed."""
    values = {float(entry[key]) for entry in history for key in ("best", "population_best", "population_mean")}
    return values.pop() if len(values) == 1 else None


def search_outcome(
    fitness: Mapping[str, Any],
    unscaled: Mapping[str, Any] | None,
    held_out: Mapping[str, Any] | None,
    *,
    left_start: bool | None = None,
    start_scale: float | None = None,
    all_scored: float | None = None,
) -> dict[str, Any]:
    """`search.outcome`: what the result was compared with, the two numbers, and the warning (None when it beats
    the unscaled model and neither degenerate case applies). `fitness`, `unscaled` and the held-out entries are
    `FitnessResult.to_json()` records; `unscaled` None (an older file) leaves the search-set comparison out."""
    if held_out and held_out.get("lpes") and held_out.get("baseline"):
        count = int(held_out["num_examples"])
        basis = f"the {count} held-out question{'s' * (count != 1)}"
        compared_on, best, reference = "held-out", held_out["lpes"]["overall"], held_out["baseline"]["overall"]
    elif unscaled:
        basis = "the search set (no held-out check: a flattering comparison)"
        compared_on, best, reference = "search set", fitness["overall"], unscaled["overall"]
    else:
        compared_on = best = reference = None
    beats = None if best is None else float(best) > float(reference)
    problems = []
    if beats is False:
        relation = "below" if float(best) < float(reference) else "the same as"
        problems.append(
            f"the searched scales score {relation} the unscaled model on {basis}: LPES {float(best):.4f}, unscaled "
            f"{float(reference):.4f}; this file is not expected to help"
        )
    if all_scored is not None:
        problems.append(
            f"every candidate scored {all_scored:.4f} on the search set, so the fitness told none apart (more "
            "questions, a larger max_new_tokens or --task.score gold_loglik give it something to select on)"
        )
    if left_start:
        scale = f" {start_scale:g}" if start_scale is not None else ""
        problems.append(
            f"the search never left its start (the same scale{scale} on every layer): it is PI at that scale, "
            "not a per-layer result"
        )
    return {
        "compared_on": compared_on,
        "lpes": best,
        "unscaled": reference,
        "beats_unscaled": beats,
        "left_start": left_start,
        "every_candidate_scored": all_scored,
        "warning": "; ".join(problems) if problems else None,
    }


def outcome_of(search: Mapping[str, Any], fitness: Mapping[str, Any]) -> dict[str, Any]:
    """A scale file's `search.outcome`, or, for a file written before it existed, the comparison recomputed from
    its held-out and unscaled records (whether it left its start is then unknown)."""
    recorded = search.get("outcome")
    if isinstance(recorded, Mapping):
        return dict(recorded)
    return search_outcome(fitness, search.get("unscaled_fitness"), search.get("held_out"))
