"""`python -m evaluation calibrate-fim`: the bias file of amortised Found in the Middle
(`fim:calibration=amortised,bias_file=FILE`).

This project's extension, not the paper's method (docs/methods/found-in-the-middle.md#amortised-calibration):
bias(k), the attention a content-free dummy document gets in slot k, is measured once on N calibration
prompts (the exact form measures it on every evaluated prompt) and kept per item-length bucket. The
prompts are built, templated and tokenised as `python -m evaluation run` builds them, so the file's
template hash matches the run's prompts; use examples the evaluation does not score (another `--seed`
for synthetic tasks, `--example_offset` past the evaluated ones for MDQA).

    python -m evaluation calibrate-fim --model workflows/assets/tiny-kv-dip --task kv \\
        --task_params '{"template": "pairs", "key_chars": 1, "distinct_keys": 8, "num_keys": 64}' \\
        --num_examples 16 --seed 5000 --method fim:dummy=blank --out results/dip-fim/fim-bias.json
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from jsonargparse import Namespace
from jsonargparse.typing import PositiveInt

from evaluation.methods import build_method, parse_method_spec
from evaluation.tasks import build_task
from repo_common.config_cli import ConfigParser, add_dataclass_options, dataclass_config, deferred
from repo_common.output_guard import check_output_file

PROG = "python -m evaluation calibrate-fim"
#: `FoundInTheMiddle.name`, spelled here so that the options are checked before its module (torch) loads.
FIM_NAME = "fim"
#: The estimating (torch, the model): imported once the options are checked.
ESTIMATE = "evaluation.fim_bias_estimate"


@dataclass
class FimCalibration:
    """The options (each also a key of a `--config` file), judged when built: what can be checked before the
    model loads without torch (the method's name, the task's parameters, the file); the method's own parameters
    load its module (torch), so `run` checks them (`check_method_parameters`)."""

    model: str
    """HF model directory"""
    out: str
    """the bias file to write (JSON), e.g. RUN/fim-bias.json"""
    task: str = "mdqa"
    """task with item spans (mdqa, kv)"""
    task_params: dict = field(default_factory=dict)
    """the task's parameters"""
    num_examples: PositiveInt = 16
    """calibration examples"""
    seed: int = 5000
    """task seed (synthetic tasks: not the evaluation's)"""
    example_offset: int = 0
    """source examples skipped"""
    gold_positions: list[int] | None = None
    """default: the task's"""
    chat_template: bool = False
    """as the run's option"""
    system_prompt: str | None = None
    """as the run's"""
    method: str = FIM_NAME
    """the fim spec the file serves (dummy, score_layers)"""
    batch_size: PositiveInt = 4
    """calibration prompts a batch"""
    threads: PositiveInt | None = None
    """torch threads (default: torch's own count)"""

    def __post_init__(self) -> None:
        check_fim_name(self.method)
        if not self.out.endswith(".json"):
            raise ValueError(f"--out: the bias file is JSON; give a path ending in .json, got {self.out!r}")
        check_task_params(self.task, calibration_params(self), "--task_params")
        check_output_file(self.out, "a bias file", ours=is_bias_file(Path(self.out)))


def add_arguments(parser: ConfigParser) -> None:
    """The options: the fields of `FimCalibration`."""
    parser.description = __doc__
    add_dataclass_options(parser, FimCalibration)


def check_fim_name(spec: str) -> None:
    """`spec` names Found in the Middle (read from the spec's text: no method module is loaded)."""
    if parse_method_spec(spec)[0] != FIM_NAME:
        raise ValueError(f"--method: give a fim spec (e.g. fim:dummy=blank), got {spec!r}")


def check_method_parameters(spec: str) -> None:
    """The fim spec's own parameters (its dummy and layers are what a bias file serves), once the options are
    parsed: checking them loads the method's module (torch), which `--help` and `--print_config` do without. A
    bad one is a ValueError, one line and exit code 2, as the other checks'."""
    build_method(spec)


def check_task_params(task: str, params: dict, option: str) -> None:
    """The task builds from `params` (names and required values), without a model: one line naming `option`."""
    try:
        build_task(task, **params)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{option}: {err}") from err


def is_bias_file(path: Path) -> bool:
    """An existing file this command may replace: a readable bias file (any other file is the user's)."""
    if not path.is_file():
        return False  # nothing to read (and `--help`-fast: the reader's module loads torch)
    try:
        deferred("evaluation.methods.fim_bias", "read_bias_file")(path)
    except (OSError, ValueError):
        return False
    return True


def prompt_set_params(task_params: dict, num_examples: int, seed: int, offset: int, gold_positions) -> dict:
    """A task's parameters for one set of prompts: which examples (count, seed, offset) and gold positions."""
    params = {**task_params, "num_examples": num_examples, "seed": seed}
    if offset:
        params["example_offset"] = offset
    if gold_positions is not None:
        params["gold_positions"] = gold_positions
    return params


def calibration_params(args: FimCalibration) -> dict:
    """The task parameters of the calibration prompts (recorded in the file)."""
    return prompt_set_params(args.task_params, args.num_examples, args.seed, args.example_offset, args.gold_positions)


def run(options: Namespace, parser: ConfigParser) -> int:
    """The checked options (the fim spec's own parameters last: they load its module), then the bias file."""
    args = dataclass_config(options, FimCalibration)
    check_method_parameters(args.method)
    return deferred(ESTIMATE, "main")(args)
