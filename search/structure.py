"""Representational structure deviation D of a scaled model, and the scale variants of the paper's Figure 3.

The LPES paper compares how far per-layer RoPE scales move the model's
internal "representational structure" away from the unscaled model (its
Eq. 12–13, Figure 3). Its exact formulas could not be checked, so this module
is OUR OPERATIONALISATION of that idea, not the paper's Eq. 12–13; replace it
once they are checked against the paper. The definition:

- Base and scaled model: the same weights, with all scales 1 (untouched RoPE)
  and with `scales[h]` in layer h (`search.policy.scaled_model`: layer h sees
  positions / s_h; NoPE layers stay unrotated).
- h_l ∈ R^{T×d}: the hidden state at the output of decoder layer l
  (`output_hidden_states=True`, entry l + 1 of transformers' tuple; the last
  entry is the one after the model's final norm, as transformers returns it),
  over the T real (non-padding) tokens of one example.
- Structure of layer l: the token–token cosine-similarity matrix
  G_l = N(h_l) N(h_l)^T, N = row-wise L2 normalisation (computed in float32).
- D_l = mean over examples of ‖G_l^scaled − G_l^base‖_F / ‖G_l^base‖_F;
  D = mean over layers of D_l. 0 means the scales leave every layer's token
  geometry unchanged.

Inputs are left-padded batches with the harness's positions
(`attention_mask.cumsum − 1`), so padding does not change D. The T×T matrices
are formed per example and layer: this is a diagnostic, not a method.

`scaling_variants` builds the comparison scales of Figure 3, and `diagnose`
is `python -m search diagnose` (prompts from the search set of the search
config, JSON + plot).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from evaluation.methods.decoding import collate
from evaluation.scale_file_model import model_mismatch
from repo_common.atomic import write_json_atomic
from repo_common.output_guard import check_output_directory
from repo_train.modeling.swapping import current_policies
from search.harness_fitness import model_fingerprint
from search.plots import plot_structure
from search.policy import scaled_model
from search.prepare import load_search_model, search_fitness, searched_model
from search.scale_file_writer import load_scale_file
from search.smoothness import smoothness

FORMAT_VERSION = 1
VARIANTS = ("searched", "uniform", "noisy", "shuffled", "random")
#: Noisy variant: searched ± U(−NOISE, NOISE), floored at SCALE_FLOOR (the search space's y lower bound, 1.0).
NOISE = 0.1
SCALE_FLOOR = 1.0
#: Random variant: one scale per layer from U(low, high), the search space's y range.
RANDOM_RANGE = (1.0, 2.0)
DEFINITION = (
    "our operationalisation of the paper's Eq. 12-13 (not checked against it): G_l = cosine-similarity matrix "
    "of the real tokens' hidden states at the output of layer l; D_l = mean over examples of "
    "||G_l^scaled - G_l^base||_F / ||G_l^base||_F; D = mean over layers of D_l"
)


@dataclasses.dataclass(frozen=True)
class StructureDeviation:
    """D_l per layer (index h = the layer `scales[h]` applies to) and their mean D."""

    per_layer: list[float]
    mean: float


def _layer_states(model, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Hidden states at the output of every decoder layer, [B, T, d] each (left padding, harness positions)."""
    position_ids = (attention_mask.cumsum(-1) - 1).masked_fill(attention_mask == 0, 0)
    with torch.no_grad():
        out = model.base_model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            output_hidden_states=True,
            use_cache=False,
        )
    return tuple(out.hidden_states[1:])


def _cosine_matrix(states: torch.Tensor) -> torch.Tensor:
    normed = F.normalize(states.float(), dim=-1)
    return normed @ normed.T


def _deviations(base: Sequence[torch.Tensor], scaled: Sequence[torch.Tensor], mask: torch.Tensor) -> torch.Tensor:
    """[B, L] relative Frobenius distance of the scaled from the base structure, per example and layer."""
    out = torch.empty(mask.shape[0], len(base), dtype=torch.float64)
    real = mask.bool()
    for layer, (b_states, s_states) in enumerate(zip(base, scaled)):
        for row in range(mask.shape[0]):
            g_base = _cosine_matrix(b_states[row, real[row]])
            g_scaled = _cosine_matrix(s_states[row, real[row]])
            out[row, layer] = (torch.linalg.norm(g_scaled - g_base) / torch.linalg.norm(g_base)).item()
    return out


def structure_deviations(
    model, batches: Iterable[tuple[torch.Tensor, torch.Tensor]], variants: Mapping[str, Sequence[float]]
) -> dict[str, StructureDeviation]:
    """D (per layer and mean) of every named scale vector against all scales 1, over the same examples.

    `batches` yields (input_ids, attention_mask) pairs, left-padded ([B, T]
    each); they are iterated once, with one base forward per batch shared by
    all variants. The model is restored afterwards.
    """
    if not variants:
        raise ValueError("structure_deviations needs at least one scale vector")
    device = model.device
    totals: dict[str, torch.Tensor] = {}
    count = 0
    for input_ids, attention_mask in batches:
        input_ids, attention_mask = input_ids.to(device), attention_mask.to(device)
        if input_ids.shape != attention_mask.shape or input_ids.dim() != 2:
            raise ValueError(
                f"need [B, T] input_ids and attention_mask, got {input_ids.shape} and {attention_mask.shape}"
            )
        if not bool((attention_mask.sum(-1) > 0).all()):
            raise ValueError("every example needs at least one real token (attention_mask all 0 in a row)")
        num_layers = len(next(iter(variants.values())))
        with scaled_model(model, [1.0] * num_layers):
            base = _layer_states(model, input_ids, attention_mask)
        for name, scales in variants.items():
            with scaled_model(model, scales):
                scaled = _layer_states(model, input_ids, attention_mask)
            batch_sum = _deviations(base, scaled, attention_mask).sum(0)
            totals[name] = totals[name] + batch_sum if name in totals else batch_sum
            del scaled
        count += input_ids.shape[0]
    if count == 0:
        raise ValueError("structure_deviations got no examples")
    results = {}
    for name, total in totals.items():
        per_layer = (total / count).tolist()
        results[name] = StructureDeviation(per_layer, float(np.mean(per_layer)))
    return results


def scaling_variants(scales: Sequence[float], rng: np.random.Generator) -> dict[str, list[float]]:
    """The scale vectors Figure 3 compares, built from the searched `scales` with a seeded numpy Generator.

    searched: as given.  uniform: every layer at the mean scale (PI at the mean).
    noisy: searched + U(−0.1, 0.1) per layer, then floored at 1.0 (the search
    space's y lower bound; so within ±0.1 of scales that are >= 1).
    shuffled: a random permutation of the searched scales over layers (can
    equal them by chance for few layers or repeated values).
    random: U(1, 2) per layer, the search space's y range.
    Draws happen in that order (noise, permutation, random), so a seed fixes all.
    """
    values = np.asarray(scales, dtype=np.float64)
    if values.ndim != 1 or len(values) < 1 or not np.all(np.isfinite(values)) or np.any(values <= 0):
        raise ValueError(f"scaling_variants needs a 1-d vector of finite scales > 0, got {list(scales)!r}")
    noisy = np.maximum(values + rng.uniform(-NOISE, NOISE, size=len(values)), SCALE_FLOOR)
    shuffled = rng.permutation(values)
    random = rng.uniform(*RANDOM_RANGE, size=len(values))
    variants = {
        "searched": values,
        "uniform": np.full_like(values, values.mean()),
        "noisy": noisy,
        "shuffled": shuffled,
        "random": random,
    }
    return {name: [float(s) for s in variants[name]] for name in VARIANTS}


# ---------------------------------------------------------------- `python -m search diagnose`


def _search_set(config, model, tokenizer):
    """The begin/middle/end search set of the config's task, built by the harness exactly as the search builds it."""
    fitness = search_fitness(config.task, model, tokenizer)
    prepared = fitness.prepared
    batches = []
    for indices in prepared.plan:
        batch = collate([prepared.prompts[i] for i in indices], tokenizer.pad_token_id)
        batches.append((batch.input_ids, batch.attention_mask))
    return batches, fitness.describe()


def diagnose(config, scale_file: str | Path, out: str | Path, seed: int = 0) -> dict[str, Any]:
    """D and smoothness S of the searched scales and their variants; writes OUT/structure.json and .png."""
    # missing, empty, or an earlier diagnose's (its structure.json); a file or another program's folder is refused
    out = check_output_directory(out, "structure.json", "a diagnose output directory")
    load_scale_file(scale_file)  # a broken file fails before the model is loaded
    model, tokenizer = load_search_model(config.model)
    num_layers = len(current_policies(model))
    loaded = load_scale_file(scale_file, expected_num_layers=num_layers)
    this = searched_model(config.model, model)
    differs = model_mismatch(loaded.model, {"config_sha256": this["identity_sha256"]}, this["weight_files"])
    if differs:  # another model's scales say nothing about this one's structure
        raise ValueError(
            f"{scale_file} was searched for another model ({loaded.model.get('name')}; differs in "
            f"{'; '.join(differs)}): pass --model the model it was searched for"
        )
    scales = loaded.scales
    variants = scaling_variants(scales, np.random.default_rng(seed))
    batches, task = _search_set(config, model, tokenizer)
    print(f"structure deviation: {num_layers} layers, {task['rows']} prompts, variants {', '.join(variants)}")
    deviations = structure_deviations(model, batches, variants)
    name = str(config.model.path) if config.model.path else model.name_or_path
    result = {
        "format_version": FORMAT_VERSION,
        "definition": DEFINITION,
        "scale_file": str(scale_file),
        "model": {"name": name, **model_fingerprint(model)},
        "task": task,
        "seed": seed,
        "num_layers": num_layers,
        "variants": {
            key: {
                "scales": variants[key],
                "D": deviations[key].mean,
                "D_per_layer": deviations[key].per_layer,
                "S": smoothness(variants[key]) if num_layers >= 3 else None,
            }
            for key in VARIANTS
        },
    }
    validate_structure(result)
    write_json_atomic(out / "structure.json", result)
    plot_structure(out / "structure.png", result, title=f"structure deviation · {name} · {task['task']}")
    for key, entry in result["variants"].items():
        s = "n/a" if entry["S"] is None else f"{entry['S']:.4f}"
        print(f"{key:9s} D {entry['D']:.6f}  S {s}  per layer {' '.join(f'{d:.4f}' for d in entry['D_per_layer'])}")
    print(f"json     {out / 'structure.json'}\nplot     {out / 'structure.png'}")
    return result


def validate_structure(data: Any) -> None:
    """Check a structure.json document (format_version 1); raise ValueError naming the first problem."""
    if not isinstance(data, dict) or data.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"not a format_version {FORMAT_VERSION} structure file; rerun `python -m search diagnose`")
    num_layers = data.get("num_layers")
    if not isinstance(num_layers, int) or num_layers < 1:
        raise ValueError(f"structure file: num_layers must be a positive integer, got {num_layers!r}")
    variants = data.get("variants")
    if (
        not isinstance(variants, dict)
        or sorted(variants) != sorted(VARIANTS)
        or not all(isinstance(entry, dict) for entry in variants.values())
    ):
        raise ValueError(f"structure file: variants must map exactly {list(VARIANTS)} to objects")
    for name, entry in variants.items():
        for key in ("scales", "D_per_layer"):
            values = entry.get(key)
            if not isinstance(values, list) or len(values) != num_layers or not all(map(np.isfinite, values)):
                raise ValueError(f"structure file: variants.{name}.{key} must be {num_layers} finite numbers")
        if not np.isfinite(entry.get("D", float("nan"))) or not np.isclose(entry["D"], np.mean(entry["D_per_layer"])):
            raise ValueError(f"structure file: variants.{name}.D must be the mean of D_per_layer")
