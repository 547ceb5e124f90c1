"""The quickstart's loop from a loop file: the same steps as the built-in loop, at full scale, through launchers.

Each train method through its launcher (torchrun on every GPU), export, the LPES search, each evaluation (alone
on the node, or `evaluate.at_once` sharing it), one plot; `--dry_run` writes every command and prints the plan
(what each step would do, on what, an estimate of its time) without running any.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from jsonargparse import Namespace

from workflows import loop_config
from workflows import loop_estimates as estimates
from workflows.commands import CommandRunner, last_checkpoint, later
from workflows.quickstart.options import ROOT, search_config
from workflows.quickstart.report import config_report_parts, write_report
from workflows.quickstart.resume import search_files, search_resume, training_resume
from workflows.steps import StepLedger, StepRunner, gpu_slots, visible_devices

#: What a dry run's commands.sh runs for the values an earlier step makes (`workflows.commands.later`): the
#: training's newest last.ckpt, as the real run takes it, and the scale file's mean, as the real run writes it.
NEWEST_CHECKPOINT = "import sys; from workflows.commands import last_checkpoint; print(last_checkpoint(sys.argv[1]))"
MEAN_SCALE = 'import sys; from workflows.loop_config import mean_scale; print("%.6g" % mean_scale(sys.argv[1]))'


def loop_steps(args: Namespace, out: Path, values: dict[str, str], problems: list[str]) -> None:
    """The loop file's steps, each skipped, resumed or rerun as OUT/steps.json says (a dry run only says which)."""
    config = args.loop
    description = f"The commands of {args.config_name}, in order."
    if args.dry_run:
        description = (
            f"Dry run of {args.config_name}: nothing was run; $(...) computes a value known only after a step."
        )
    # every launcher starts one process per GPU (scripts/launch_train.sh, run_search.sh, run_evaluation.sh)
    environment = {"NPROC_PER_NODE": str(config.gpus)}
    run = CommandRunner(out, description=description, cwd=ROOT, dry_run=args.dry_run, env=environment)
    steps = StepRunner(run, StepLedger(out / "steps.json"), dry_run=args.dry_run)
    search_settings = search_config(config)  # with search.args: they may change the examples it uses
    first_example = searched_examples(search_settings)
    given_dtype = estimates.option(config.evaluate.args, "--dtype", "auto")
    dtype = "bfloat16 (--dtype auto)" if given_dtype == "auto" else given_dtype
    on_gpus = f"{config.gpus} process{'es' * (config.gpus > 1)} on {config.gpus} GPU{'s' * (config.gpus > 1)}"
    shapes = {name: estimates.model_shape(ROOT / path) for name, path in config.train.methods.items()}
    shapes[loop_config.BASE_MODEL] = next((shape for shape in shapes.values() if shape is not None), None)

    def evaluation_cost(name: str, methods: list[str], gpus: int) -> str:
        if shapes[name] is None:
            return estimates.described(None)
        tasks, items, examples, grid = estimates.evaluation_shape(fill(config.evaluate.args))
        return estimates.described(
            estimates.evaluation_hours(shapes[name], tasks, items, examples, grid, methods, gpus)
        )

    started = time.perf_counter()

    def fill(items: list[str]) -> list[str]:
        return [loop_config.fill(item, values) for item in items]

    models = {loop_config.BASE_MODEL: config.base}
    for name, train_config in config.train.methods.items():
        run_dir = out / "runs" / name
        steps.step(f"train-{name}", f"train {name}", [*fill(config.train.launcher), train_config,
                   "--trainer.default_root_dir", str(run_dir), "--model.init_from", config.base,
                   *fill(config.train.args)], inputs=[ROOT / train_config, ROOT / config.base], outputs=[run_dir],
                   resume=lambda d=run_dir: training_resume(d),
                   resources=f"{on_gpus}, {args.training_plans[name].summary()}")  # fmt: skip
        checkpoint = (
            later([run.python, "-c", NEWEST_CHECKPOINT, str(run_dir)])
            if args.dry_run
            else str(last_checkpoint(run_dir))
        )
        models[name] = str(out / "models" / name)
        steps.step(f"export-{name}", f"export the {name} checkpoint", ["repo_train", "export", "--checkpoint",
                   checkpoint, "--out", models[name], "--tokenizer", config.base], module=True,
                   inputs=[checkpoint, ROOT / config.base], outputs=[Path(models[name])],
                   after=[f"train-{name}"], resources="1 process on the CPU")  # fmt: skip

    scale_file = out / "scales" / f"{config.search.model}.json"
    searched = ROOT / models[config.search.model]
    model_step = {name: [f"export-{name}"] for name in config.train.methods} | {loop_config.BASE_MODEL: []}
    search_shape = shapes[config.search.model]
    search_cost = estimates.described(
        None if search_shape is None else estimates.search_hours(search_shape, search_settings, config.gpus)
    )
    steps.step("search", f"LPES search on the {config.search.model} model", [*fill(config.search.launcher),
               "--model.path", models[config.search.model], "--config", config.search.config, "--out", str(scale_file),
               *fill(config.search.args)], inputs=[searched, ROOT / config.search.config], outputs=[scale_file],
               related=search_files(scale_file), resume=lambda: search_resume(scale_file),
               after=model_step[config.search.model], resources=f"{on_gpus}, {search_cost}")  # fmt: skip
    values["scale_file"] = str(scale_file)
    if args.dry_run:
        mean = later([run.python, "-c", MEAN_SCALE, str(scale_file)])
    else:
        mean = f"{loop_config.mean_scale(scale_file):.6g}"
    values["mean_scale"] = mean

    eval_dirs, evaluations = {}, []
    at_once = config.evaluate.at_once
    slots = gpu_slots(config.gpus, at_once, visible_devices()) if at_once > 1 else [{}]
    for name, methods in config.evaluate.methods.items():
        eval_dirs[name] = out / "eval" / name
        filled = fill(methods)
        method_args = [arg for method in filled for arg in ("--methods", method)]
        searched_methods = any(str(scale_file) in method for method in filled)
        where = on_gpus if at_once == 1 else evaluation_slot(config.gpus, at_once, len(evaluations) % at_once)
        evaluations.append(dict(key=f"eval-{name}", title=f"evaluate the {name} model", argv=[
            *fill(config.evaluate.launcher), "--model", models[name], *fill(config.evaluate.args), "--example_offset",
            str(first_example), *method_args, "--out", str(eval_dirs[name])], inputs=[ROOT / models[name]],
            outputs=[eval_dirs[name]], resume=list,
            resources=f"{where}, {dtype}, {evaluation_cost(name, filled, config.gpus // at_once)}",
            after=[*model_step[name], *(["search"] if searched_methods else [])]))  # fmt: skip
    steps.together(evaluations, slots, logs=out / "logs")
    first, *others = eval_dirs.values()
    if others:
        run("one plot: every evaluated model and method", "evaluation", "report", "--out", str(first),
            *(arg for other in others for arg in ("--compare", str(other))))  # fmt: skip
    if args.dry_run:
        print_plan(steps.decisions)
        for name, plan in args.training_plans.items():
            print(f"\ntraining plan of {name} ({config.train.methods[name]}):\n{plan.report()}", flush=True)
        print(question_ranges(search_settings, config.evaluate.args, first_example), flush=True)
        print(evaluation_data_line(config.evaluate.args), flush=True)
        print(f"\ndry run: nothing was run; the commands are in {run.script}", flush=True)
        for problem in problems:
            print(f"warning: a real run here would stop at once: {problem}", file=sys.stderr)
        return
    write_report(out, run, eval_dirs, time.perf_counter() - started, *config_report_parts(out, args, config,
                 eval_dirs, scale_file, models))  # fmt: skip
    print(f"\nreport: {out / 'README.md'}")


def evaluation_slot(gpus: int, at_once: int, slot: int) -> str:
    """The plan's 'runs on' of an evaluation that shares the node: its processes and GPU slice (the slot it takes
    first; a later evaluation takes whichever slot frees first)."""
    size = gpus // at_once
    first = slot * size
    devices = f"GPU {first}" if size == 1 else f"GPUs {first}-{first + size - 1}"
    return f"{size} process{'es' * (size > 1)} on {devices} ({at_once} evaluations at once)"


def searched_examples(search) -> int:
    """How many source examples the search uses from the start of its data (fitness, then held-out): every
    evaluation starts after them (`--example_offset`), so no number of the report is measured on them; the
    evaluation also checks the scale file's record of them (`evaluation.search_overlap`)."""
    held = search.held_out
    return max(search.task.num_examples, search.held_out_start + held.num_examples if held.num_examples else 0)


def question_ranges(search, evaluate_args: list[str], first: int) -> str:
    """Which source examples each step uses: the search's fitness and held-out ranges, then the evaluations'."""
    held, held_start = search.held_out, search.held_out_start
    count = int(estimates.option(evaluate_args, "--num_examples", "0") or 0)
    evaluated = f"{first}-{first + count - 1}" if count else f"from {first} on"
    held_part = f", held-out {held_start}-{held_start + held.num_examples - 1}" if held.num_examples else ""
    return (
        f"examples: the search uses {search.task.name} fitness 0-{search.task.num_examples - 1}{held_part} "
        f"(seed {search.task.seed}); every evaluation uses {evaluated} (--example_offset {first}), and refuses "
        "a scale file on its search's examples"
    )


def evaluation_data_line(evaluate_args: list[str]) -> str:
    """What the evaluations measure Lost in the Middle on, and whether it compares with the paper's numbers."""
    tasks = estimates.evaluation_shape(evaluate_args)[0]
    if "mdqa_release" in tasks:
        return (
            "MDQA: the release's own prompts (mdqa_release: its nq-open-{k}_total_documents_gold_at_{i} files in "
            "the data folder, retrieved distractors), as Liu et al. measured"
        )
    if "mdqa" in tasks:
        return (
            "MDQA: prompts built from nq-open-oracle (mdqa: distractors are other questions' gold passages), which "
            "do not compare with Liu et al.'s numbers; --tasks mdqa_release reads the release's own"
        )
    return "MDQA: not evaluated"


def print_plan(decisions) -> None:
    """The dry run's plan: per step, what a real run would do with it, on what, and why."""
    print("\nplan (OUT/steps.json decides on each run: done steps are skipped, interrupted ones resumed):")
    rows = [("step", "action", "runs on", "why"), *((t, d.action, r, d.reason) for t, d, r in decisions)]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    for row in rows:
        print("  " + "  ".join(f"{cell:<{width}}" for cell, width in zip(row, widths)) + f"  {row[3]}")
