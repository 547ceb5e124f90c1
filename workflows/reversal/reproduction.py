"""The reproduction's loop over seeds and methods (`python -m workflows reproduce-reversal`; `command` checks
the options first): a (method, seed) whose evaluation summary exists is skipped, so rerunning resumes."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Mapping
from pathlib import Path

from evaluation.results import RECORDS_FILE, load_summary, read_records, write_json_atomic
from evaluation.tasks.reversal_tokenizer import reversal_tokenizer
from repo_common.atomic import write_text_atomic
from repo_common.config_cli import config_values, dump_config
from workflows.commands import CommandRunner
from workflows.reversal.names import DESCRIPTIONS, ROOT
from workflows.reversal.options import Reversal
from workflows.reversal.report import results_markdown, write_results
from workflows.reversal.results import failure_modes, per_length_accuracy
from workflows.reversal.training import held_out_sequences, run_one, write_training_data


def progress_line(info: Mapping, curve: Mapping[int, float], train_max: int, resumed: bool) -> str:
    """One run's times, final training loss and accuracy in / beyond the training lengths."""
    parts = ["evaluation exists, skipped"] if resumed else []
    if not resumed and "train_s" in info:
        parts.append(f"train {info['train_s']:.0f} s")
    if not resumed and "eval_s" in info:
        parts.append(f"eval {info['eval_s']:.0f} s")
    if info.get("final_train_loss") is not None:
        parts.append(f"final loss {info['final_train_loss']:.3f}")
    inside = [a for n, a in curve.items() if n <= train_max]
    beyond = [a for n, a in curve.items() if n > train_max]
    for label, values in ((f"accuracy <= {train_max}", inside), (f"> {train_max}", beyond)):
        if values:
            parts.append(f"{label}: {statistics.fmean(values):.3f}")
    return ", ".join(parts)


def reproduce(args: Reversal) -> dict:
    """Run (or resume) every (method, seed) of the checked options `args` into `args.out`; the results."""
    out = Path(args.out) if Path(args.out).is_absolute() else (Path.cwd() / args.out)
    threads = {name: str(args.threads) for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    # commands.sh first: its header names this command, so an interrupted run is still recognised as its own
    run = CommandRunner(out, description=DESCRIPTIONS[0], cwd=ROOT, fresh=False, env=threads)
    write_text_atomic(out / "config.yaml", dump_config(config_values(args)))  # --config replays it

    tokenizer = reversal_tokenizer()
    tokenizer_dir = out / "tokenizer"
    tokenizer.save_pretrained(tokenizer_dir)
    exclude = held_out_sequences(args)

    runs_file = out / "runs.json"
    runs: dict = json.loads(runs_file.read_text()) if runs_file.is_file() else {}
    per_seed: dict[str, dict[int, dict[int, float]]] = {method: {} for method in args.methods}
    total, done, started = args.seeds * len(args.methods), 0, time.perf_counter()
    for seed in range(args.seeds):
        data = None
        for method in args.methods:
            name = f"{method}-seed{seed}"
            done += 1
            summary_file = out / "eval" / name / "summary.json"
            resumed = summary_file.is_file()
            if not resumed:
                if data is None:
                    path = out / "data" / f"train-seed{seed}.jsonl"
                    counts = write_training_data(path, seed, args, tokenizer, exclude)
                    data = {"path": path, "seq_len": counts["longest_tokens"], **counts}
                info = run_one(run, out, method, seed, data, tokenizer_dir, len(tokenizer), args)
                runs[name] = {**runs.get(name, {}), **info, "dropped_as_test": data["dropped_as_test"]}
                write_json_atomic(runs_file, runs)
            per_seed[method][seed] = per_length_accuracy(load_summary(summary_file), args.test_min)
            line = progress_line(runs.get(name, {}), per_seed[method][seed], args.train_max, resumed)
            print(
                f"[{done}/{total}] {name}: {line} (elapsed {(time.perf_counter() - started) / 60:.1f} min)", flush=True
            )
    failures = {
        method: failure_modes(
            [r for s in range(args.seeds) for r in read_records(out / "eval" / f"{method}-seed{s}" / RECORDS_FILE)],
            args.test_min,
            args.train_max,
        )
        for method in args.methods
    }
    results = write_results(out, args, per_seed, runs, failures)
    print(f"\nresults: {out / 'results.md'}\n")
    print(results_markdown(results).split("\n## Every length")[0])
    return results
