"""The position methods `check-gpu` runs, read from the registries, and how each one's cached decoding is recomputed.

Every model position method (`repo_train.modeling.methods.position_methods`) and every registered
evaluation method (`evaluation.methods.METHODS`) is checked, so a new method is covered without an
edit here. `SETTINGS` holds only what a method needs beyond its name: required options (a scale file,
a scale) and how its cached steps are recomputed; a method not listed runs with its defaults through
the harness's prefill recomputation, which holds for any method.
"""

from __future__ import annotations

from dataclasses import dataclass

from evaluation.methods import METHODS
from repo_train.modeling.methods import position_methods


@dataclass(frozen=True)
class MethodCase:
    """One position method as the checks run it: the model's position method and the method stack on top."""

    name: str
    position_method: str
    spec: str = "baseline"
    #: How the cached steps are recomputed: "forward" (one forward over prompt + tokens, per-batch state of the
    #: method kept), "prefill" (the harness prefills prompt + the first t tokens, for methods acting in the decode
    #: loop's hooks), "fim" (one forward with Found-in-the-Middle's edit on every current query row), "rows" (one
    #: forward with the method's last rows recomputed, one per step: PositionalHidden's rule).
    recompute: str = "forward"
    #: Why flash_attention_2 does not apply, when it does not.
    no_flash: str = ""


#: Evaluation methods that need more than their name and the generic prefill recomputation.
SETTINGS = {
    "lpes": MethodCase("lpes", "rope", "lpes:scale_file={scale_file}"),
    "pi": MethodCase("pi", "rope", "pi:scale=2"),
    "caliope": MethodCase("caliope", "rope", "caliope:calibrator=hourglass", "prefill"),
    # gamma = the vocabulary: every token keeps a finite contrast. A top-k set smaller than the vocabulary can differ
    # between bf16 and fp32, and one token -inf in one and finite in the other is an infinite difference (check-gpu
    # on an H200, 2026-11-28: gamma 1024 passed on the tiny model's 260 tokens and gave inf on SmolLM2's 49,152).
    "pcd": MethodCase("pcd", "rope", "pcd:gamma={vocab_size}", "prefill"),
    "fim": MethodCase(
        "fim", "rope", "fim", "fim", no_flash="fim's attention probe wraps SDPA (it refuses other kernels)"
    ),
    "ms_poe": MethodCase("ms_poe", "rope", "ms_poe"),
    # its cached decoding recomputes the prompt's last row and every generated row: "rows" recomputes them so
    "positional_hidden": MethodCase(
        "positional_hidden", "rope", "positional_hidden:dims=2,layers=1-2,factor=0", "rows"
    ),
}


def registered_cases() -> tuple[MethodCase, ...]:
    """One case per model position method (the order of the docs: RoPE first), then one per evaluation method."""
    model = sorted(position_methods(), key=lambda name: (name != "rope", name))
    calibrators = [name for name in METHODS if name != "baseline"]
    return (
        *(MethodCase(name, name) for name in model),
        *(SETTINGS.get(name, MethodCase(name, "rope", name, "prefill")) for name in calibrators),
    )


CASES = registered_cases()
CASE_NAMES = tuple(case.name for case in CASES)
