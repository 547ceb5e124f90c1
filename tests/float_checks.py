"""Float comparisons that hold on any CPU: differences measured against the scale of the values.

Two float32 computations of the same quantity by different paths (a float64 reference, another kernel, the KV
cache, padding, another thread count, AVX2 vs AVX-512, MKL vs OpenBLAS) differ by a few units in the last place
of the *largest* numbers that went into them, not of each element: an element near zero inherits the error of
its large neighbours. So a tolerance is written as `max |actual - expected| <= rel * scale`, where `scale` is
max |expected| unless a better one is given (e.g. the magnitude of the inputs a small difference came from).

The factors `rel` in the tests are ~10x or more above the drift measured on a 2-core AMD EPYC with 1 and 2
threads (see docs in each test); they stay far below what a real bug (a wrong sign, a missing term) produces.
To re-measure: `FLOAT_DRIFT_LOG=/tmp/drift.jsonl pytest ...` appends one line per check with
max |Δ| / scale and the allowed `rel`.

Exact comparisons (`torch.equal`) remain right where both results come from literally the same kernels on the
same inputs in the same order (a model against its reloaded copy, a policy that hands HF's own tensors back):
then the bits are the same on every machine. Each such place says why in a comment.
"""

from __future__ import annotations

import json
import os

import torch


def _f64(values) -> torch.Tensor:
    if isinstance(values, torch.Tensor):
        return values.detach().to("cpu", torch.float64)
    return torch.as_tensor(values, dtype=torch.float64)


def _log(what: str, drift: float, scale: float, rel: float) -> None:
    path = os.environ.get("FLOAT_DRIFT_LOG")
    if path:
        record = {
            "test": os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" (", 1)[0],
            "what": what,
            "drift": drift,
            "scale": scale,
            "ratio": drift / scale if scale else float("inf"),
            "rel": rel,
        }
        with open(path, "a") as handle:
            handle.write(json.dumps(record) + "\n")


def assert_close_to_scale(actual, expected, rel: float, *, scale: float | None = None, what: str = "values"):
    """max |actual - expected| <= rel * scale, scale = max |expected| by default.

    Tensors, arrays, lists or floats. Non-finite entries (masked logits = -inf) must sit at the same places
    with the same values; only the finite ones are compared. Returns max |Δ| / scale.
    """
    a, e = _f64(actual), _f64(expected)
    assert a.shape == e.shape, f"{what}: shapes differ, {tuple(a.shape)} vs {tuple(e.shape)}"
    finite = torch.isfinite(e)
    assert torch.equal(torch.isfinite(a), finite) and torch.equal(a[~finite], e[~finite]), (
        f"{what}: non-finite entries differ"
    )
    a, e = a[finite], e[finite]
    drift = (a - e).abs().max().item() if e.numel() else 0.0
    if scale is None:
        scale = e.abs().max().item() if e.numel() else 0.0
    scale = float(scale)
    assert scale > 0, f"{what}: scale is 0; give `scale=` explicitly"
    _log(what, drift, scale, rel)
    assert drift <= rel * scale, (
        f"{what}: max |Δ| = {drift:.3g} > {rel:g} x scale {scale:.4g} = {rel * scale:.3g} "
        f"(max |Δ| / scale = {drift / scale:.3g})"
    )
    return drift / scale


def assert_greedy(logits: torch.Tensor, tokens: torch.Tensor, rel: float = 1e-4, *, what: str = "greedy tokens"):
    """Each token of `tokens [...]` is an argmax of `logits [..., V]` up to float noise.

    Greedy decoding on one path and argmax of a recomputation on another path may pick different tokens only
    if two logits tie to within float32 drift; so the chosen token's logit must be within rel * max |logits|
    of the row's maximum (any larger gap is a wrong token, not a near-tie).
    """
    logits = _f64(logits)
    assert logits.shape[:-1] == tokens.shape, f"{what}: logits {tuple(logits.shape)} vs tokens {tuple(tokens.shape)}"
    chosen = logits.gather(-1, tokens[..., None].long())[..., 0]
    gap = logits.max(-1).values - chosen
    scale = logits.abs().max().item()
    worst = gap.max().item()
    _log(what, worst, scale, rel)
    assert worst <= rel * scale, (
        f"{what}: a token's logit is {worst:.3g} below its row's max (allowed {rel:g} x {scale:.4g}); "
        f"gaps {gap.tolist()}"
    )
