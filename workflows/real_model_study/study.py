"""The real-model study's steps in order (`python -m workflows study-real-model`, options checked first by
`workflows.real_model_study.command`): each skipped when its output exists, so rerunning resumes."""

from __future__ import annotations

import json
import math
import statistics
import time
from pathlib import Path

import torch

from evaluation.results import load_summary
from repo_common.atomic import write_json_atomic, write_text_atomic
from repo_common.config_cli import config_values, dump_config
from search.outcome import outcome_of
from workflows.commands import CommandRunner
from workflows.real_model_study.bias import measure_bias
from workflows.real_model_study.data import split_data
from workflows.real_model_study.methods import (
    bucket_bases,
    caliope_method,
    eval_command,
    lpes_name,
    main_methods,
    search_config,
    uniform_scale,
)
from workflows.real_model_study.names import DESCRIPTIONS, ROOT
from workflows.real_model_study.report import fmt_minutes, method_rows, plot, report
from workflows.real_model_study.speed import BUDGET_SECONDS, measure_speed, projected_seconds
from workflows.real_model_study.verdicts import claims

FORMAT_VERSION = 1


def run_study(args) -> None:
    """Run (or resume) the study of the checked options `args` into `args.out`."""
    if args.gpu and not args.dry_run and not torch.cuda.is_available():  # else a traceback after the model step
        raise ValueError(
            f"--gpu needs a CUDA GPU, and torch {torch.__version__} sees none: drop --gpu for the CPU study"
        )
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    # commands.sh first: its header names this command, so an interrupted study is still recognised as its own
    run = CommandRunner(
        out,
        description=DESCRIPTIONS[0],
        cwd=ROOT,
        fresh=False,
        env={"OMP_NUM_THREADS": str(args.threads)},
        dry_run=args.dry_run,
    )
    write_text_atomic(out / "config.yaml", dump_config(config_values(args)))
    timings = Timings(out / "timings.json")
    start = time.perf_counter()
    model_dir = Path(args.model).resolve()
    run("the model", "repo_train", "real-model", "--out", str(model_dir), log=out / "logs" / "model.log")
    timings.values.setdefault("model", time.perf_counter() - start)  # a resumed study keeps the first run's times
    folders = split_data(Path(args.data), out, args.size)
    speed, projection = _speed(args, out, model_dir, folders, timings)
    scale_file = out / "scales" / "smollm2-mdqa.json"
    if not scale_file.is_file():
        search_args = ["--model.path", str(model_dir), "--config", str(search_config(out, folders, args.size, args))]
        seconds = run(
            "LPES search",
            *("search", "run", *search_args, "--out", str(scale_file), "--resume"),
            log=out / "logs" / "search.log",
        )
        timings.record("LPES search", seconds)
    if args.dry_run:
        return
    search = json.loads(scale_file.read_text())
    scales = [float(s) for s in search["scales"]]
    bias_file = out / "attention_bias.json"
    if not bias_file.is_file():
        measure_bias(model_dir, folders["eval"], args.size, args, bias_file)
    bias = json.loads(bias_file.read_text())
    timings.record("attention bias", bias["seconds"])
    caliope, caliope_why = caliope_method(args.size, speed)
    main_specs = main_methods(caliope, scales, scale_file, args.score)
    _evaluate(args, out, run, model_dir, folders["eval"], main_specs, speed, timings)
    study = _study(args, out, speed, projection, search, bias, caliope_why, timings.values)
    write_json_atomic(out / "study.json", study)
    plot(bias, study["main_rows"][0]["result"], out / "study.png", args.score)
    report(out, study)
    total = sum(v for v in timings.values.values() if math.isfinite(v))
    print(f"\nwrote {out / 'README.md'} (study time {fmt_minutes(total)})")


class Timings:
    """Each step's seconds, written as each step ends (a resumed study keeps the earlier steps' times)."""

    def __init__(self, path: Path):
        self.path = path
        self.values: dict[str, float] = json.loads(path.read_text()) if path.is_file() else {}

    def record(self, step: str, seconds: float) -> None:
        self.values[step] = seconds
        write_json_atomic(self.path, self.values)


def _speed(args, out: Path, model_dir: Path, folders: dict, timings: Timings) -> tuple[dict, dict]:
    """The baseline's measured speed (measured once) and the projected time of every step, printed."""
    speed_file = out / "speed.json"
    if not speed_file.is_file():
        start = time.perf_counter()
        write_json_atomic(speed_file, measure_speed(model_dir, folders["eval"], args.size, args))
        timings.record("speed", time.perf_counter() - start)
    speed = json.loads(speed_file.read_text())
    projection = projected_seconds(args.size, speed)
    print(
        f"speed: {speed['prompts_per_second']:.2f} prompts/s ({speed['mean_prompt_tokens']:.0f} tokens); projected: "
        + ", ".join(f"{k} {fmt_minutes(v)}" for k, v in projection.items())
        + f"; total {fmt_minutes(sum(projection.values()))}",
        flush=True,
    )
    if sum(projection.values()) > BUDGET_SECONDS:
        print(
            f"warning: the projected time passes {fmt_minutes(BUDGET_SECONDS)}; lower --questions / "
            "--costly_questions (or run on a GPU)",
            flush=True,
        )
    return speed, projection


def _evaluate(args, out: Path, run, model_dir: Path, data: Path, main_specs: dict, speed: dict, timings) -> None:
    """The harness on the main methods, then on the costly ones (fewer questions, their own baseline)."""
    costly_methods = {
        "baseline": "baseline",
        "fim": "fim",
        "attention_buckets": f"attention_buckets:bases={bucket_bases(speed['rope_theta'])}",
    }
    for step, folder, methods, questions in (
        ("evaluation", out / "eval" / "main", main_specs, args.size["questions"]),
        ("costly methods", out / "eval" / "costly", costly_methods, args.size["costly_questions"]),
    ):
        if not _complete(folder, len(methods)):
            seconds = run(
                step,
                *eval_command(model_dir, data, folder, list(methods.values()), questions, args.size, args),
                log=out / "logs" / f"{folder.name}.log",
            )
            timings.record(step, seconds)


def _study(args, out: Path, speed, projection, search, bias, caliope_why: str, timings: dict) -> dict:
    """study.json: every number of the report."""
    scales = [float(s) for s in search["scales"]]
    mean_scale = statistics.fmean(scales)
    names = {
        "baseline": "baseline",
        "caliope": f"CALIOPE hourglass ({caliope_why})",
        "pi": f"PI at the LPES mean ({mean_scale:.3f})",
        "ms_poe": "Ms-PoE",
        "string": "STRING (the authors' S = 0.33 × max_position_embeddings, W = 128)",
        "lpes": lpes_name(scales),
        "positional_hidden": "PositionalHidden (channel 100 × 0, layers 10-25, searched)",
        "pcd": "PCD",
        "fim": "Found in the Middle",
        "attention_buckets": "Attention Buckets (6 bases, θ × 1–2.25)",
    }
    main_rows = method_rows(load_summary(out / "eval" / "main" / "summary.json"), names)
    same = uniform_scale(scales)
    if same is not None:  # a study resumed from one that ran PI too: one method, one row
        main_rows = [row for row in main_rows if row["key"] != "pi"]
    costly_rows = method_rows(load_summary(out / "eval" / "costly" / "summary.json"), names)
    return {
        "format_version": FORMAT_VERSION,
        "score": args.score,
        "size": args.size,
        "speed": speed,
        "projection": projection,
        "search": {
            "scales": scales,
            "mean_scale": mean_scale,
            "uniform_scale": same,
            "held_out": search.get("held_out") or search.get("search", {}).get("held_out"),
            "outcome": outcome_of(search.get("search", {}), search["fitness"]),
        },
        "bias": {key: bias[key] for key in ("layers", "questions", "mean", "mass")},
        "main_rows": main_rows,
        "costly_rows": costly_rows,
        "claims": claims(main_rows, costly_rows, bias, args.score, uniform=same),
        "timings": timings,
    }


def _complete(folder: Path, methods: int) -> bool:
    if not (folder / "summary.json").is_file():
        return False
    return len(load_summary(folder / "summary.json")["results"].get("mdqa", {})) >= methods
