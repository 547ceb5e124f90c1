#!/usr/bin/env python
"""REPO paper, appendix C: text reversal with NoPE, RoPE and REPO, CPU only.

    python scripts/reproduce_reversal.py [--out outputs/reversal] [--seeds 3] [--methods nope,rope,repo]

For every (seed, method): train a 4-layer tiny OLMo-2 from scratch on word
reversal of lengths 2-20 (loss on the answer only, a word-level tokenizer),
with the real Lightning path; export it; evaluate it with the harness on
lengths 2-30 (`--tasks reversal`, exact match). Then aggregate accuracy per
length over seeds (mean ± sample std), the in-distribution (2-20) and
extrapolation (21-30) means, and write OUT/results.json, OUT/results.md and
OUT/reversal.png. A (method, seed) whose evaluation summary exists is skipped,
so an interrupted run resumes by rerunning the same command.

Training sequences come from `reversal_training_words` (its own seed stream,
seeded by the run's seed), minus any that equal a test sequence; the test set
(seed EVAL_SEED) is the same for every run, so methods and seeds are compared
on the same prompts. Every command is appended to OUT/commands.sh; each run's
output goes to OUT/logs/. Docs: docs/reproductions.md.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as `python scripts/reproduce_reversal.py` from anywhere
    sys.path.insert(0, str(ROOT))

from evaluation.results import RECORDS_FILE, load_summary, read_records, write_json_atomic
from evaluation.tasks.reversal import build_reversal_prompt, reversal_training_words, reversed_answer
from repo_common.atomic import save_figure_atomic, write_text_atomic
from repo_common.config_cli import ConfigParser, dump_config, parse_script, script_config
from workflows.commands import CommandRunner, cpu_trainer_section, last_checkpoint, logged_train_losses

FORMAT_VERSION = 1
EVAL_SEED = 12345
TASK = "reversal"
METHOD_LABEL = "baseline"  # the harness's name for "the model as trained"
ALL_METHODS = ("nope", "rope", "repo")
PAPER_CLAIM = (
    "All three methods are near perfect on the training lengths (<= 20); beyond length 20, REPO keeps a higher "
    "accuracy than RoPE and NoPE (REPO paper, appendix C)."
)


PROG = "scripts/reproduce_reversal.py"


def build_parser() -> ConfigParser:
    """The reproduction's options (each also a key of a `--config` file; the old dashed spellings work too)."""
    parser = ConfigParser.for_command(PROG, __doc__)
    parser.add_argument("--out", type=str, default="outputs/reversal", help="output directory (created; resumes)")
    parser.add_argument("--seeds", type=int, default=3, help="seeds per method (0, 1, ...)")
    parser.add_argument(
        "--methods",
        type=list[str] | str,
        default=list(ALL_METHODS),
        help="position methods: comma-separated on the command line, or a list",
    )
    parser.add_argument("--steps", type=int, default=1500, help="training steps per model")
    parser.add_argument("--hidden", type=int, default=128, help="model width (4 layers, 4 heads, FFN 4x)")
    parser.add_argument("--lr", type=float, default=1e-2, help="peak learning rate (linear decay to 0)")
    parser.add_argument("--warmup", type=int, default=100, help="linear warm-up steps")
    parser.add_argument("--batch_size", "--batch-size", type=int, default=32, help="sequences per step")
    parser.add_argument(
        "--train_examples",
        "--train-examples",
        type=int,
        default=50000,
        help="training sequences per seed (steps x batch = 48,000 are used)",
    )
    parser.add_argument(
        "--examples_per_length", "--examples-per-length", type=int, default=50, help="test sequences per length"
    )
    parser.add_argument(
        "--train_lengths", "--train-lengths", type=str, default="2-20", help="training lengths MIN-MAX (paper: 2-20)"
    )
    parser.add_argument(
        "--test_lengths", "--test-lengths", type=str, default="2-30", help="test lengths MIN-MAX (paper: 2-30)"
    )
    parser.add_argument(
        "--eval_batch_size", "--eval-batch-size", type=int, default=32, help="prompts per forward in evaluation"
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads per command (OMP_NUM_THREADS); 1 is fastest on a shared 2-core CPU",
    )
    return parser


def check_options(args: argparse.Namespace) -> None:
    """The domain checks (a ValueError naming the option); sets `methods` as a list and the length bounds."""
    methods = args.methods.split(",") if isinstance(args.methods, str) else args.methods
    args.methods = [m.strip() for m in methods if m.strip()]
    unknown = sorted(set(args.methods) - set(ALL_METHODS))
    if unknown or not args.methods:
        raise ValueError(f"--methods: unknown {unknown}; choose from {list(ALL_METHODS)}")
    args.train_min, args.train_max = _length_range("--train-lengths", args.train_lengths)
    args.test_min, args.test_max = _length_range("--test-lengths", args.test_lengths)
    for name in ("seeds", "steps", "hidden", "batch_size", "train_examples", "examples_per_length", "threads"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The checked options; a mistake is one line and exit code 2, `--print_config` prints them and exits."""
    return parse_script(build_parser(), argv, check_options)


def _length_range(flag: str, text: str) -> tuple[int, int]:
    try:
        low, high = (int(part) for part in text.split("-"))
    except ValueError:
        raise ValueError(f"{flag} must look like 2-20, got {text!r}") from None
    if not 1 <= low <= high:
        raise ValueError(f"{flag}: need 1 <= MIN <= MAX, got {text!r}")
    return low, high


# ------------------------------------------------------------------ data and configs
def held_out_sequences(args: argparse.Namespace) -> set[tuple[str, ...]]:
    """The word tuples of the test set (the harness builds the same rows from the same seed)."""
    from evaluation.tasks import build_task

    task = build_task(
        TASK, num_examples=args.examples_per_length, min_length=args.test_min, max_length=args.test_max, seed=EVAL_SEED
    )
    return {tuple(row["words"]) for row in task.rows()}


def write_training_data(path: Path, seed: int, args: argparse.Namespace, tokenizer, exclude) -> dict[str, int]:
    """JSONL of {"prompt", "completion"} for one seed, minus test sequences; returns counts."""
    from evaluation.tasks.reversal_tokenizer import unknown_words  # lazy: --help answers without transformers

    words_lists = reversal_training_words(args.train_examples, args.train_min, args.train_max, seed=seed)
    kept = [words for words in words_lists if tuple(words) not in exclude]
    lines, longest = [], 0
    for words in kept:
        prompt, _ = build_reversal_prompt(words)
        completion = " " + reversed_answer(words)
        unknown = unknown_words(tokenizer, prompt + completion)
        if unknown:
            raise ValueError(f"training text has words the tokenizer does not know: {unknown[:5]}")
        longest = max(longest, len(tokenizer(prompt + completion, add_special_tokens=False)["input_ids"]) + 1)
        lines.append(json.dumps({"prompt": prompt, "completion": completion}))
    write_text_atomic(path, "\n".join(lines) + "\n")
    return {"written": len(kept), "dropped_as_test": len(words_lists) - len(kept), "longest_tokens": longest}


def training_config(
    out: Path,
    run: str,
    method: str,
    seed: int,
    data: Path,
    seq_len: int,
    tokenizer_dir: Path,
    vocab_size: int,
    args: argparse.Namespace,
) -> Path:
    config = {
        "seed_everything": seed,
        "trainer": cpu_trainer_section(
            args.steps,
            out / "runs" / run,
            log_every_n_steps=max(1, min(50, args.steps // 10)),
            enable_progress_bar=False,
            logger={
                "class_path": "pytorch_lightning.loggers.CSVLogger",
                "init_args": {"save_dir": str(out / "runs" / run)},
            },
        ),
        "model": {
            "preset_name": "tiny",
            "position": method,
            "lr": args.lr,
            "warmup_steps": min(args.warmup, args.steps - 1),
            "config_overrides": {
                "vocab_size": vocab_size,
                "pad_token_id": 0,
                "eos_token_id": 1,
                "bos_token_id": None,
                "hidden_size": args.hidden,
                "intermediate_size": 4 * args.hidden,
                "num_hidden_layers": 4,
            },
        },
        "data": {
            "train": {
                "class_path": "repo_train.data.PromptCompletionData",
                "init_args": {"paths": [str(data)], "tokenizer": str(tokenizer_dir), "seq_len": seq_len, "seed": seed},
            },
            "global_batch_size": args.batch_size,
            "micro_batch_size": args.batch_size,
        },
        "checkpoint": {"every_n_train_steps": args.steps},
    }
    path = out / "configs" / f"train-{run}.yaml"
    write_text_atomic(path, yaml.safe_dump(config, sort_keys=False))
    return path


def final_train_loss(run_dir: Path, last: int = 5) -> float | None:
    """Mean of the last `last` logged train/loss values of a run's CSV log (None when there is none)."""
    losses = logged_train_losses(run_dir)
    values = [losses[step] for step in sorted(losses)]
    return statistics.fmean(values[-last:]) if values else None


# ------------------------------------------------------------------ aggregation
def per_length_accuracy(summary: Mapping, min_length: int) -> dict[int, float]:
    """Length -> accuracy of the model's baseline from a harness summary (gold_position = length - min_length)."""
    by_position = summary["results"][TASK][METHOD_LABEL]["by_position"]
    return {int(position) + min_length: float(cell["accuracy"]) for position, cell in by_position.items()}


def _mean_std(values: Sequence[float]) -> dict[str, float]:
    """Mean and sample standard deviation (ddof=1; 0 for a single value)."""
    values = [float(v) for v in values]
    return {"mean": statistics.fmean(values), "std": statistics.stdev(values) if len(values) > 1 else 0.0}


def aggregate(per_seed: Mapping[str, Mapping[int, Mapping[int, float]]], train_max: int) -> dict[str, dict]:
    """method -> seed -> length -> accuracy  =>  per method: per-length and range means ± std over seeds.

    Range means are taken per seed first (mean over the lengths in range), then
    mean ± std over seeds. In distribution: lengths <= train_max; extrapolation:
    lengths > train_max (None when no such length was tested). Every seed of a
    method must cover the same lengths.
    """
    out = {}
    for method, seeds in per_seed.items():
        if not seeds:
            raise ValueError(f"method {method!r} has no seeds to aggregate")
        lengths = sorted(next(iter(seeds.values())))
        for seed, curve in seeds.items():
            if sorted(curve) != lengths:
                raise ValueError(f"{method} seed {seed} covers lengths {sorted(curve)}, others {lengths}")
        inside = [n for n in lengths if n <= train_max]
        outside = [n for n in lengths if n > train_max]

        def range_mean(chosen, seeds=seeds):
            if not chosen:
                return None
            return {
                **_mean_std([statistics.fmean(c[n] for n in chosen) for c in seeds.values()]),
                "lengths": [chosen[0], chosen[-1]],
            }

        out[method] = {
            "seeds": sorted(seeds),
            "per_length": {
                n: {**_mean_std([c[n] for c in seeds.values()]), "by_seed": [seeds[s][n] for s in sorted(seeds)]}
                for n in lengths
            },
            "in_distribution": range_mean(inside),
            "extrapolation": range_mean(outside),
        }
    return out


def failure_modes(records: Sequence[Mapping], min_length: int, train_max: int) -> dict | None:
    """How predictions on lengths > train_max go wrong, pooled over the given harness records.

    `mean_predicted_words` and `mean_gold_words`; `stops_at_train_max`: fraction
    of predictions with exactly train_max words; `correct_prefix` / `correct_suffix`:
    mean fraction of the gold words reproduced in order before the first mistake,
    reading from the start / from the end (a model that garbles only the words
    it has to fetch from beyond the trained distance keeps a long correct
    suffix). None when no record is beyond train_max.
    """
    beyond = [r for r in records if int(r["gold_position"]) + min_length > train_max]
    if not beyond:
        return None
    predicted, gold, prefix, suffix = [], [], [], []
    for record in beyond:
        words, answer = record["prediction"].split(), record["answers"][0].split()
        predicted.append(len(words))
        gold.append(len(answer))
        prefix.append(_agreeing(words, answer) / len(answer))
        suffix.append(_agreeing(words[::-1], answer[::-1]) / len(answer))
    return {
        "n": len(beyond),
        "mean_predicted_words": statistics.fmean(predicted),
        "mean_gold_words": statistics.fmean(gold),
        "stops_at_train_max": sum(n == train_max for n in predicted) / len(predicted),
        "correct_prefix": statistics.fmean(prefix),
        "correct_suffix": statistics.fmean(suffix),
    }


def _agreeing(words: Sequence[str], answer: Sequence[str]) -> int:
    """How many leading words agree."""
    return next((i for i, (a, b) in enumerate(zip(words, answer)) if a != b), min(len(words), len(answer)))


# ------------------------------------------------------------------ outputs
def _cell(stats: Mapping | None) -> str:
    return "n/a" if stats is None else f"{stats['mean']:.3f} ± {stats['std']:.3f}"


def _seed_cell(method_stats: Mapping, index: int) -> str:
    """'in / out' accuracy means of the index-th seed of a method."""
    per_length = method_stats["per_length"]
    parts = []
    for key in ("in_distribution", "extrapolation"):
        if method_stats[key] is not None:
            low, high = method_stats[key]["lengths"]
            parts.append(statistics.fmean(per_length[n]["by_seed"][index] for n in per_length if low <= n <= high))
    return " / ".join(f"{v:.3f}" for v in parts)


def results_markdown(results: Mapping, table_lengths: Sequence[int] = (2, 5, 10, 15, 20, 22, 25, 30)) -> str:
    settings, methods = results["settings"], results["methods"]
    shown = [n for n in table_lengths if all(n in m["per_length"] for m in methods.values())]
    all_lengths = sorted(next(iter(methods.values()))["per_length"]) if methods else []
    train = f"{settings['train_min']}-{settings['train_max']}"
    lines = [
        "# REPO appendix C: text reversal",
        "",
        (
            f"Exact-match accuracy, mean ± sample std over {settings['seeds']} seed(s), "
            f"{settings['examples_per_length']} test sequences per length; trained on lengths {train}."
        ),
        "",
        "| method | in distribution | extrapolation | " + " | ".join(f"L={n}" for n in shown) + " |",
        "|---|---|---|" + "---|" * len(shown),
    ]
    for method, m in methods.items():
        cells = [_cell(m["per_length"][n]) for n in shown]
        lines.append(
            f"| {method} | {_cell(m['in_distribution'])} | {_cell(m['extrapolation'])} | " + " | ".join(cells) + " |"
        )
    lines += ["", "## Every length", "", "| length | " + " | ".join(methods) + " |", "|---|" + "---|" * len(methods)]
    for n in all_lengths:
        lines.append(f"| {n} | " + " | ".join(_cell(m["per_length"][n]) for m in methods.values()) + " |")
    lines += [
        "",
        "## Per seed (in distribution / extrapolation)",
        "",
        "| method | " + " | ".join(f"seed {i}" for i in next(iter(methods.values()))["seeds"]) + " |",
        "|---|" + "---|" * len(next(iter(methods.values()))["seeds"]),
    ]
    for method, m in methods.items():
        lines.append(f"| {method} | " + " | ".join(_seed_cell(m, i) for i in range(len(m["seeds"]))) + " |")
    failures = {method: m["beyond_training"] for method, m in methods.items() if m.get("beyond_training")}
    if failures:
        lines += [
            "",
            f"## What the models output beyond length {settings['train_max']} (pooled over seeds)",
            "",
            f"| method | n | mean words predicted (gold) | exactly {settings['train_max']} words | correct prefix "
            + "| correct suffix |",
            "|---|---|---|---|---|---|",
        ]
        for method, f in failures.items():
            lines.append(
                f"| {method} | {f['n']} | {f['mean_predicted_words']:.1f} ({f['mean_gold_words']:.1f}) "
                f"| {f['stops_at_train_max']:.2f} | {f['correct_prefix']:.2f} | {f['correct_suffix']:.2f} |"
            )
    lines += ["", f"Paper: {PAPER_CLAIM}", "", "## Settings", "", "```json", json.dumps(settings, indent=2), "```"]
    return "\n".join(lines) + "\n"


def plot_results(results: Mapping, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    settings = results["settings"]
    fig, ax = plt.subplots(figsize=(7, 4))
    for method, m in results["methods"].items():
        lengths = sorted(m["per_length"])
        mean = [m["per_length"][n]["mean"] for n in lengths]
        std = [m["per_length"][n]["std"] for n in lengths]
        (line,) = ax.plot(lengths, mean, marker="o", markersize=3, label=method)
        ax.fill_between(
            lengths,
            [max(0.0, a - s) for a, s in zip(mean, std)],  # accuracy lives in [0, 1]
            [min(1.0, a + s) for a, s in zip(mean, std)],
            color=line.get_color(),
            alpha=0.2,
        )
    ax.axvline(settings["train_max"], color="gray", linestyle="--", linewidth=1, label="longest training length")
    ax.set_xlabel("sequence length (words)")
    ax.set_ylabel("exact-match accuracy")
    ax.set_ylim(-0.03, 1.03)
    ax.set_title(f"Text reversal, 4-layer d={settings['hidden']}, {settings['seeds']} seed(s), mean ± std")
    ax.legend()
    fig.tight_layout()
    save_figure_atomic(fig, path)


def write_results(
    out: Path, args: argparse.Namespace, per_seed, runs: Mapping[str, Mapping], failures: Mapping | None = None
) -> dict:
    settings = {
        "seeds": args.seeds,
        "methods": args.methods,
        "steps": args.steps,
        "hidden": args.hidden,
        "layers": 4,
        "heads": 4,
        "lr": args.lr,
        "warmup": args.warmup,
        "batch_size": args.batch_size,
        "train_examples": args.train_examples,
        "train_min": args.train_min,
        "train_max": args.train_max,
        "test_min": args.test_min,
        "test_max": args.test_max,
        "examples_per_length": args.examples_per_length,
        "eval_seed": EVAL_SEED,
        "tokenizer": "word-level (evaluation.tasks.reversal_tokenizer)",
        "threads": args.threads,
    }
    methods = aggregate(per_seed, args.train_max)
    for method, stats in (failures or {}).items():
        methods[method]["beyond_training"] = stats
    results = {
        "format_version": FORMAT_VERSION,
        "settings": settings,
        "methods": methods,
        "runs": runs,
        "paper_claim": PAPER_CLAIM,
    }
    write_json_atomic(out / "results.json", results)
    write_text_atomic(out / "results.md", results_markdown(results))
    plot_results(results, out / "reversal.png")
    return results


# ------------------------------------------------------------------ the loop
def run_one(
    run, out: Path, method: str, seed: int, data: dict, tokenizer_dir: Path, vocab_size: int, args: argparse.Namespace
) -> dict:
    """Train, export and evaluate one (method, seed); returns timings and the final training loss."""
    name = f"{method}-seed{seed}"
    model_dir, eval_dir, run_dir = out / "models" / name, out / "eval" / name, out / "runs" / name
    info: dict = {}
    if not (model_dir / "config.json").is_file():
        shutil.rmtree(run_dir, ignore_errors=True)  # a half-finished run restarts from scratch
        config = training_config(
            out, name, method, seed, data["path"], data["seq_len"], tokenizer_dir, vocab_size, args
        )
        info["train_s"] = run(
            f"train {name}",
            "repo_train",
            "fit",
            "--config",
            str(config),
            log=out / "logs" / f"train-{name}.log",
            echo=False,
        )
        checkpoint = last_checkpoint(run_dir)
        # export writes the directory atomically: it exists complete or not at all
        run(
            f"export {name}",
            "repo_train",
            "export",
            "--checkpoint",
            str(checkpoint),
            "--out",
            str(model_dir),
            "--tokenizer",
            str(tokenizer_dir),
            log=out / "logs" / f"export-{name}.log",
            echo=False,
        )
    info["final_train_loss"] = final_train_loss(run_dir)
    start = time.perf_counter()
    run(
        f"evaluate {name} on lengths {args.test_min}-{args.test_max}",
        "evaluation",
        "run",
        "--model",
        str(model_dir),
        "--tasks",
        TASK,
        "--num-examples",
        str(args.examples_per_length),
        "--seed",
        str(EVAL_SEED),
        "--task-param",
        f"{TASK}:min_length={args.test_min}",
        "--task-param",
        f"{TASK}:max_length={args.test_max}",
        "--max-new-tokens",
        str(args.test_max + 2),
        "--batch-size",
        str(args.eval_batch_size),
        "--method",
        METHOD_LABEL,
        "--no-progress",
        "--no-report",
        "--out",
        str(eval_dir),
        log=out / "logs" / f"eval-{name}.log",
        echo=False,
    )
    info["eval_s"] = time.perf_counter() - start
    return info


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


def main(argv: Sequence[str] | None = None) -> dict:
    args = parse_args(argv)
    out = Path(args.out) if Path(args.out).is_absolute() else (Path.cwd() / args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / "config.yaml", dump_config(script_config(build_parser(), args)))  # --config replays it
    threads = {name: str(args.threads) for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    run = CommandRunner(
        out, description="The commands scripts/reproduce_reversal.py ran, in order.", cwd=ROOT, fresh=False, env=threads
    )
    from evaluation.tasks.reversal_tokenizer import reversal_tokenizer  # lazy: --help answers without transformers

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


if __name__ == "__main__":
    main()
