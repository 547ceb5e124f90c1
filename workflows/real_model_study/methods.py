"""The study's methods and commands: CALIOPE's gaps and Attention Buckets' bases for this model, the LPES
search's config, and the harness command of each evaluation step."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path

import yaml

from evaluation.methods.caliope import gap_schedule
from repo_common.atomic import write_text_atomic

#: Attention Buckets' default bases are for Llama-2 (θ = 10,000); here they keep those ratios to this model's θ.
BUCKET_RATIOS = (1.0, 1.75, 1.8, 1.9, 2.0, 2.25)


def caliope_method(size: Mapping[str, int], speed: Mapping[str, float]) -> tuple[str, str]:
    """CALIOPE hourglass with the published gaps when the calibrated positions stay inside the model's trained
    context, else gaps scaled down until they do (docs/methods/caliope.md#gaps-for-short-contexts)."""
    added = gap_schedule("hourglass", size["documents"], delta_min=5.0, delta_max=1000.0)[-1]
    room = speed["max_position_embeddings"] - 1.5 * speed["mean_prompt_tokens"] - size["max_new_tokens"]
    if added <= room:
        why = f"published gaps: they add {added:.0f} positions, inside the {speed['max_position_embeddings']} trained"
        return "caliope:calibrator=hourglass,delta_min=5,delta_max=1000", why
    factor = room / added
    spec = f"caliope:calibrator=hourglass,delta_min={5 * factor:.3g},delta_max={1000 * factor:.3g}"
    return spec, f"published gaps × {factor:.3g}, to stay inside the trained context"


def bucket_bases(theta: float) -> str:
    return "|".join(f"{theta * ratio:g}" for ratio in BUCKET_RATIOS)


def search_config(out: Path, folders: Mapping[str, Path], size: Mapping[str, int], args) -> Path:
    """The paper's GA proportions (Table 9: 12 parents, 4 crossover, 16 mutation of 32) at this population."""
    population = size["population"]
    parents = max(2, round(population * 12 / 32))
    crossover = max(1, round(population * 4 / 32))
    config = {
        "task": {"name": "mdqa", "num_items": size["documents"], "num_examples": size["search_questions"],
                 "data_dir": str(folders["search"]), "max_new_tokens": size["max_new_tokens"],
                 "batch_size": args.batch_size, "chat_template": True, "score": args.score},
        "model": {"dtype": args.dtype, "device": args.device},
        "space": {"num_points": 4},
        "ga": {"population": population, "parents": parents, "crossover_offspring": crossover,
               "mutation_offspring": population - parents - crossover, "generations": size["generations"]},
        "held_out": {"num_examples": size["held_out"], "offset": size["search_questions"]},
    }  # fmt: skip
    path = out / "configs" / "search.yaml"
    write_text_atomic(path, yaml.safe_dump(config, sort_keys=False))
    return path


def uniform_scale(scales: Sequence[float]) -> float | None:
    """The one scale of a search that gave every layer the same (LPES is then PI at that scale), else None."""
    return float(scales[0]) if scales and len(set(scales)) == 1 else None


#: PositionalHidden's setting for SmolLM2-135M-Instruct, as `python -m search positional-dims` found it
#: (configs/positional_hidden/smollm2-135m-instruct.json, 2026-12-07): channel 100 of the attention input scaled
#: by 0 in layers 10-25. Inline, so that the study needs no file outside the package.
POSITIONAL_HIDDEN = "positional_hidden:dims=100,layers=10-25,factor=0"


def main_methods(caliope: str, scales: Sequence[float], scale_file: Path, score: str) -> dict[str, str]:
    """The main table's method specs by key. PI runs at the LPES mean, unless the search gave every layer one
    scale: LPES is then PI at that scale, so it runs once, as LPES (the report says why PI has no row)."""
    mean = statistics.fmean(scales)
    methods = {
        "baseline": "baseline",
        caliope.split(",")[0]: caliope,
        "pi": f"pi:scale={mean:.4g}",
        "ms_poe": "ms_poe",
        "string": "string",
        "lpes": f"lpes:scale_file={scale_file}",
        "positional_hidden": POSITIONAL_HIDDEN,
    }
    if uniform_scale(scales) is not None:
        del methods["pi"]
    if score == "metric":  # PCD's contrast has no comparable log-likelihood (`forced_scoring_problem`)
        methods["pcd"] = "pcd"
    return methods


def lpes_name(scales: Sequence[float]) -> str:
    """LPES's row name: one name for one method, so uniform scales say that they are PI at that scale."""
    same = uniform_scale(scales)
    return "LPES" if same is None else f"LPES = PI at {same:.3f} (the search gave every layer that scale)"


def eval_command(model: Path, data_dir: Path, out: Path, methods: Sequence[str], questions: int, size, args):
    return [
        "evaluation", "run", "--model", str(model), "--tasks", "mdqa", "--data_dir", str(data_dir),
        "--num_documents", str(size["documents"]), "--num_examples", str(questions), "--gold_positions", "all",
        "--chat_template", "true", "--max_new_tokens", str(size["max_new_tokens"]),
        "--batch_size", str(args.batch_size), "--device", args.device, "--dtype", args.dtype, "--no_progress",
        "--score", args.score,
        *(flag for method in methods for flag in ("--methods", method)), "--out", str(out),
    ]  # fmt: skip
