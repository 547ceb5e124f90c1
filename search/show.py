"""`python -m search show`: check a scale file and print what it holds, whether it beats the unscaled model, and
an evaluation command that runs as printed: on examples its search did not use, with every option of the
search that changes the prompts or their scores."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from jsonargparse import Namespace

from evaluation.model_loading import TINY_DEFAULT_NAME
from evaluation.tasks import TASKS, build_task
from evaluation.tasks.base import source_fingerprint
from repo_common.config_cli import ConfigParser
from search.fitness import describe_result
from search.outcome import outcome_of
from search.scale_file_writer import ScaleFile, load_scale_file


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
    if search.get("unscaled_fitness"):
        print(f"unscaled   {describe_result(search['unscaled_fitness'])} (every scale 1, the same search set)")
    print(
        f"search     seed {search['seed']}, {search['generations']} generations, "
        f"{search.get('evaluations', '?')} candidates, {search['wall_time_s']:.1f} s, weights {search['weights']}"
    )
    held = search.get("held_out")
    if held:
        print(f"held-out   baseline {describe_result(held['baseline'])}")
        print(f"           pi:scale={held['pi_mean']['scale']:.4g} {describe_result(held['pi_mean'])}")
        print(f"           lpes     {describe_result(held['lpes'])}")
    outcome = outcome_of(search, data.fitness)
    if outcome["warning"]:
        print(f"WARNING    {outcome['warning']}")
    elif outcome["beats_unscaled"]:
        print(
            f"outcome    beats the unscaled model on the {outcome['compared_on']}: LPES {outcome['lpes']:.4f}, "
            f"unscaled {outcome['unscaled']:.4f}"
        )
    print_evaluation_command(data, path)
    return 0


def print_evaluation_command(data: ScaleFile, path: str) -> None:
    """The `evaluate` lines: the evaluation command of the file (`evaluation_command`) and its note."""
    argv, note = evaluation_command(data, path, sum(data.scales) / len(data.scales))
    if argv is not None:
        print(f"evaluate   {shlex.join(argv)}")
    print(f"           ({note})")


def evaluation_command(data: ScaleFile, path: str, mean: float) -> tuple[list[str] | None, str]:
    """`python -m evaluation run` of the baseline, this file and PI at its mean scale on the search's task, past
    every example the search used (`search.examples_used`), with the search's prompt options; and a note saying
    which examples. None (and the reason) when the file records no task or its data holds no unused example."""
    search = data.search
    task = search.get("task")
    if not isinstance(task, Mapping) or "params" not in task:
        return None, "no evaluation command: the file records no search task (hand-made or older)"
    used = search.get("examples_used") or {}
    held = search.get("held_out") or {}
    ranges = [used.get("fitness"), used.get("held_out")] if used else []
    ends = [int(r["example_offset"]) + int(r["num_examples"]) for r in ranges if r]
    offset = max(ends or [int(task["num_examples"]) + int(held.get("num_examples", 0))])
    wanted = int(held.get("num_examples") or task["num_examples"])
    count, why = _unused_examples(task, offset, wanted, set(used.get("fingerprints", ())))
    if count == 0:
        return None, f"no evaluation command: {why}"
    argv = [sys.executable, "-m", "evaluation", "run"]  # the interpreter running: pasted, it runs in any shell
    model = data.model["name"]
    if not str(model).startswith(TINY_DEFAULT_NAME):
        argv += ["--model", str(model)]
    argv += evaluation_task_flags(task, search.get("run_config") or {}, data.model, offset, count)
    argv += ["--methods", "baseline", "--methods", f"lpes:scale_file={path}", "--methods", f"pi:scale={mean:.6g}"]
    argv += ["--out", str(Path("results") / Path(path).stem)]  # a folder of its own, resumed if run again
    note = f"examples {offset}-{offset + count - 1}: after the search's own ({_ranges(used) or 'not recorded'})"
    return argv, note + (f"; {why}" if why else "")


def _ranges(used: Mapping[str, Any]) -> str:
    """The search's fitness and held-out ranges as the note names them, e.g. 'fitness 0-3, held-out 4-7'."""
    parts = []
    for key, label in (("fitness", "fitness"), ("held_out", "held-out")):
        part = used.get(key)
        if part:
            first = int(part["example_offset"])
            parts.append(f"{label} {first}-{first + int(part['num_examples']) - 1}")
    return ", ".join(parts)


def _unused_examples(task: Mapping[str, Any], offset: int, wanted: int, fingerprints: set[str]) -> tuple[int, str]:
    """How many of `wanted` examples from `offset` the evaluation can take (the data's end, or the first one the
    search used under another number: a file with repeated questions), and why fewer. Without the task's code or
    data here (a user's task, a file on another machine), `wanted`, unchecked."""
    name = task["task"]
    if name not in TASKS:
        return wanted, "not checked against the data here (the task's module is not imported)"
    params = {k: v for k, v in task["params"].items() if k != "gold_positions" and v is not None}

    def examples(num_examples: int | None) -> dict[str, str]:
        """Example id -> fingerprint of the examples from `offset`, in order (one gold position: one row each)."""
        built = build_task(name, **{**params, "num_examples": num_examples, "example_offset": offset,
                                    "gold_positions": [0]})  # fmt: skip
        found: dict[str, str] = {}
        for row in built.rows():
            found.setdefault(str(row["example_id"]), source_fingerprint(row))
        return found

    try:
        try:
            found = examples(wanted)
        except ValueError:  # the data ends first: take what it has after the offset
            found = examples(None)
    except FileNotFoundError:
        return wanted, "its data file is not on this machine: not checked"
    except ValueError:  # nothing after the offset: the search used every example
        found = {}
    count = 0
    for fingerprint in list(found.values())[:wanted]:
        if fingerprint in fingerprints:
            break
        count += 1
    if count == 0:
        return 0, f"its data has no example after the {offset} the search used; evaluate on another data file"
    return count, "" if count == wanted else f"the data has {count} unused examples there, not {wanted}"


def evaluation_task_flags(
    task: Mapping[str, Any],
    run_config: Mapping[str, Any] | None = None,
    model: Mapping[str, Any] | None = None,
    example_offset: int = 0,
    num_examples: int | None = None,
) -> list[str]:
    """`python -m evaluation run` flags that rebuild a scale file's search task, gold at every position, from
    `example_offset`, with the search's prompt options: the chat template and system prompt, the score, the
    token budgets, truncation, the batch size, and a loaded model's dtype and attention.

    Every build parameter goes through --task_param (it overrides the CLI's defaults), so generated and
    release-file tasks come back the same. The tiny default's weights come from `--seed`, so its seed is the
    model's and the task's own seed, where it differs, goes through --task_param.
    """
    name, params = task["task"], task["params"]
    run_task = (run_config or {}).get("task") or {}
    run_model = (run_config or {}).get("model") or {}
    weights = (model or {}).get("weight_files") or {}
    task_seed = int(params.get("seed", 0))
    seed = int(weights["tiny_default_seed"]) if "tiny_default_seed" in weights else task_seed
    count = int(task["num_examples"]) if num_examples is None else num_examples
    flags = ["--import", task["import"]] if task.get("import") else []  # a user's task: its module first
    flags += ["--tasks", name, "--num_examples", str(count), "--seed", str(seed)]
    if example_offset:
        flags += ["--example_offset", str(example_offset)]
    flags += ["--gold_positions", "all"]
    for key, value in params.items():
        if key not in ("seed", "gold_positions", "num_examples", "example_offset") and value is not None:
            flags += ["--task_param", f"{name}:{key}={value}"]
    if seed != task_seed:
        flags += ["--task_param", f"{name}:seed={task_seed}"]
    prompt = task.get("prompt_format") or {}
    if prompt.get("chat_template"):
        flags += ["--chat_template", "true"]
        if prompt.get("system_prompt") is not None:
            flags += ["--system_prompt", str(prompt["system_prompt"])]
    if task.get("score", "metric") != "metric":
        flags += ["--score", str(task["score"])]
    if task.get("max_new_tokens") is not None:
        flags += ["--max_new_tokens", str(task["max_new_tokens"])]
    for key in ("max_length", "truncate", "batch_size"):
        if run_task.get(key) is not None:
            flags += [f"--{key}", str(run_task[key])]
    if "tiny_default_seed" not in weights:  # the tiny default is built in float32 with sdpa; a loaded model may not
        for key in ("dtype", "attn_implementation"):
            if run_model.get(key) is not None:
                flags += [f"--{key}", str(run_model[key])]
    return flags
