"""`python -m workflows` (also `repo-workflows`): the commands that sit on top of every package.

`quickstart` (the whole loop: train, search, calibrate, evaluate, report; `workflows.quickstart`), the
reproductions (`reproduce-position-bias`, `reproduce-reversal`), the real-model study and the lm-eval
cross-check, `check-gpu` (every GPU path, one table; `workflows.gpu_check`), the benchmarks (`benchmark-*`, one
cost side by side in one run each; `workflows.benchmarks`) and `device-kit` (what an offline GPU node lacks,
packed; `workflows.device_kit`), configured the project's one way (`repo_common.config_cli`: `--config`,
`--print_config`, one-line errors). A command's module is imported only when it runs (`deferred`).
"""

from __future__ import annotations

import sys

from repo_common.config_cli import deferred, dispatch

#: The run commands' modules are imported only when that command runs (`deferred`): `--help` stays fast.
COMMANDS = {
    "quickstart": (
        "the whole loop on the built-in tiny default, or at full scale from a loop file (--config): one report",
        deferred("workflows.quickstart.options", "add_arguments"),
        deferred("workflows.quickstart.command", "run"),
    ),
    "reproduce-position-bias": (
        "LPES and the calibrators on a tiny RoPE model trained to lose the middle, over seeds (CPU)",
        deferred("workflows.reproduce_position_bias", "add_arguments"),
        deferred("workflows.reproduce_position_bias", "run"),
    ),
    "check-gpu": (
        "prove the GPU paths (bf16, flash-attn 2, NCCL + DeepSpeed, harness, MFU): one table",
        deferred("workflows.gpu_check.options", "add_arguments"),
        deferred("workflows.gpu_check.options", "run"),
    ),
    "benchmark-calibrators": (
        "each training-free method's decode, total and memory cost against the baseline: one table",
        deferred("workflows.benchmarks.calibrators", "add_arguments"),
        deferred("workflows.benchmarks.calibrators", "run"),
    ),
    "benchmark-search": (
        "the racing search against the plain GA: prompts and time to reach the plain GA's result",
        deferred("workflows.benchmarks.search", "add_arguments"),
        deferred("workflows.benchmarks.search", "run"),
    ),
    "benchmark-harness": (
        "the harness's generation loop against model.generate, and the speed-up of batching",
        deferred("workflows.benchmarks.harness", "add_arguments"),
        deferred("workflows.benchmarks.harness", "run"),
    ),
    "benchmark-fim": (
        "Found in the Middle against plain generation: time, peak memory, what its probe keeps",
        deferred("workflows.benchmarks.found_in_middle", "add_arguments"),
        deferred("workflows.benchmarks.found_in_middle", "run"),
    ),
    "benchmark-fit": (
        "tokens/s, MFU and peak memory of `python -m repo_train fit`, RoPE and REPO alternating, one GPU",
        deferred("workflows.benchmarks.fit", "add_arguments"),
        deferred("workflows.benchmarks.fit", "run"),
    ),
    "benchmark-repo-overhead": (
        "REPO vs RoPE vs transformers' OLMo-2: training-step time, memory and parameters",
        deferred("workflows.benchmarks.repo_overhead", "add_arguments"),
        deferred("workflows.benchmarks.repo_overhead", "run"),
    ),
    "benchmark-training": (
        "training throughput of RoPE vs REPO through Lightning, and DDP scaling",
        deferred("workflows.benchmarks.training", "add_arguments"),
        deferred("workflows.benchmarks.training", "run"),
    ),
    "benchmark-startup": (
        "how long each command takes to answer --help, a refusal and --print_config",
        deferred("workflows.benchmarks.startup", "add_arguments"),
        deferred("workflows.benchmarks.startup", "run"),
    ),
    "device-kit": (
        "pack what an offline GPU node lacks (wheels, data, the real model) into transfers of a set size",
        deferred("workflows.device_kit.command", "add_arguments"),
        deferred("workflows.device_kit.command", "run"),
    ),
    "study-real-model": (
        "lost in the middle on SmolLM2: every method on real NQ MDQA, the attention bias, an LPES search",
        deferred("workflows.real_model_study.command", "add_arguments"),
        deferred("workflows.real_model_study.command", "run"),
    ),
    "crosscheck-lm-eval": (
        "the project's harness against lm-evaluation-harness on the same MDQA prompts: outputs and speed",
        deferred("workflows.lm_eval_crosscheck.command", "add_arguments"),
        deferred("workflows.lm_eval_crosscheck.command", "run"),
    ),
    "reproduce-reversal": (
        "REPO paper, appendix C: text reversal with NoPE, RoPE and REPO on tiny models trained on the CPU",
        deferred("workflows.reversal.command", "add_arguments"),
        deferred("workflows.reversal.command", "run"),
    ),
}
#: Commands whose `--print_config` runs their action, which prints the options as checked and resolved (hidden
#: options and derived values left out; the quickstart: a loop file's sections). A command whose options are a
#: dataclass (its module's `OPTIONS`: `benchmark-fit`'s `FitBenchmark`) prints them as parsed, without running
#: anything; its action builds the dataclass, whose `__post_init__` judges the values.
TYPED_COMMANDS = (
    "check-gpu",
    *(name for name in COMMANDS if name.startswith("benchmark-")),
    "device-kit",
)
RESOLVES_CONFIG = [
    "quickstart",
]
#: User mistakes: one clear line, no traceback.
USER_ERRORS = (ValueError, FileNotFoundError)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    return dispatch(
        "python -m workflows",
        "repo-train workflows: the whole loop, reproductions, studies, benchmarks and checks on every package.",
        COMMANDS,
        argv,
        USER_ERRORS,
        resolves_config=RESOLVES_CONFIG,
    )
