"""`python -m search show`: check a scale file and print what it holds, with the evaluation that reproduces it."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from jsonargparse import Namespace

from evaluation.model_loading import TINY_DEFAULT_NAME
from repo_common.config_cli import ConfigParser
from search.fitness import describe_result
from search.scale_file_writer import load_scale_file


def command(options: Namespace, _parser: ConfigParser) -> int:
    """The `show` command: its one argument and option, parsed by `search.cli`."""
    return show(options.scale_file, options.num_layers)


def show(path: str, num_layers: int | None) -> int:
    """Validate a scale file and print what it holds."""
    data = load_scale_file(path, expected_num_layers=num_layers)
    scales = data.scales
    mean = sum(scales) / len(scales)
    curve = data.curve
    print(f"scale file {path}: valid (format_version {data.format_version})")
    print(f"model      {data.model['name']} (config sha256 {data.model['config_sha256'][:16]}…)")
    degree = f", degree {curve['degree']}" if curve["degree"] is not None else ""
    print(f"curve      {curve['type']}{degree}; control points {[tuple(p) for p in data.control_points]}")
    print(f"scales     {' '.join(f'{s:.3f}' for s in scales)}  ({data.num_layers} layers, mean {mean:.4g})")
    search = data.search
    loglik = search.get("task", {}).get("score") == "gold_loglik"  # files before task.score: the metric
    print(
        f"fitness    {describe_result(data.fitness)}"
        + (" (gold answer's mean log-probability per token)" if loglik else "")
    )
    print(
        f"search     seed {search['seed']}, {search['generations']} generations, "
        f"{search.get('evaluations', '?')} candidates, {search['wall_time_s']:.1f} s, weights {search['weights']}"
    )
    held = search.get("held_out")
    if held:
        print(f"held-out   baseline {describe_result(held['baseline'])}")
        print(f"           pi:scale={held['pi_mean']['scale']:.4g} {describe_result(held['pi_mean'])}")
        print(f"           lpes     {describe_result(held['lpes'])}")
    model = "" if data.model["name"].startswith(TINY_DEFAULT_NAME) else f"--model {data.model['name']} "
    flags = " ".join(shlex.quote(flag) for flag in evaluation_task_flags(search["task"]))
    print(
        f"evaluate   python -m evaluation run {model}{flags} --method baseline "
        f"--method lpes:scale_file={path} --method pi:scale={mean:.6g} --out DIR"
    )
    print("           (the search's own task; for prompts it did not see, change --seed or see docs/search.md)")
    return 0


def evaluation_task_flags(task: Mapping[str, Any]) -> list[str]:
    """`python -m evaluation run` flags that rebuild a scale file's search task, gold at every position.

    Every build parameter goes through --task-param (it overrides the CLI's
    defaults), so generated and release-file tasks come back the same.
    """
    name, params = task["task"], task["params"]
    flags = ["--import", task["import"]] if task.get("import") else []  # a user's task: its module first
    flags += ["--tasks", name, "--num-examples", str(task["num_examples"]), "--seed", str(params.get("seed", 0))]
    flags += ["--gold-positions", "all"]
    for key, value in params.items():
        if key not in ("seed", "gold_positions", "num_examples") and value is not None:
            flags += ["--task-param", f"{name}:{key}={value}"]
    return flags
