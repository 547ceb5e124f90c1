"""The position methods `check-gpu` runs, and how each one's cached decoding is recomputed.

Kept apart from the checks (`positions`) so the command line can name them
without importing the evaluation harness.
"""

from __future__ import annotations

from dataclasses import dataclass

MODEL_METHODS = ("rope", "nope", "r2n1", "n2r1", "repo")


@dataclass(frozen=True)
class MethodCase:
    """One position method as the checks run it: the model's position method and the method stack on top."""

    name: str
    position_method: str
    spec: str = "baseline"
    #: How the cached steps are recomputed: "forward" (one forward over prompt + tokens, per-batch state of the
    #: method kept), "prefill" (the harness prefills prompt + the first t tokens, for methods acting in the decode
    #: loop's hooks), "fim" (one forward with Found-in-the-Middle's edit on every current query row).
    recompute: str = "forward"
    #: Why flash_attention_2 does not apply, when it does not.
    no_flash: str = ""


CASES = (
    *(MethodCase(method, method) for method in MODEL_METHODS),
    MethodCase("lpes", "rope", "lpes:scale_file={scale_file}"),
    MethodCase("pi", "rope", "pi:scale=2"),
    MethodCase("caliope", "rope", "caliope:calibrator=hourglass", "prefill"),
    # gamma >= vocabulary: every token keeps a finite contrast (the top-30 set could differ between bf16 and fp32)
    MethodCase("pcd", "rope", "pcd:gamma=1024", "prefill"),
    MethodCase("fim", "rope", "fim", "fim", no_flash="fim's attention probe wraps SDPA (it refuses other kernels)"),
    MethodCase("ms_poe", "rope", "ms_poe"),
    MethodCase("attention_buckets", "rope", "attention_buckets", "prefill"),
)
CASE_NAMES = tuple(case.name for case in CASES)
