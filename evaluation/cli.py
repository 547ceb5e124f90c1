"""`python -m evaluation`: run a task × method grid on a model, or re-render a report.

This file only turns command-line options into a `RunConfig` (task parameters,
data files, defaults of the tiny built-in model); the work is in
`evaluation.runner` and `evaluation.report`. User mistakes end with one line on
stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from evaluation.methods import METHODS, MethodStack, parse_value
from evaluation.models import DEVICES
from evaluation.tasks import GRID_NAMES, TASKS
from repo_train.argtypes import positive_int
from repo_train.cli_errors import OneLineArgumentParser, report_user_errors

REPO_ROOT = Path(__file__).resolve().parents[1]
FIXTURE_NQ = REPO_ROOT / "tests" / "fixtures" / "lost_in_the_middle" / "nq-open-oracle.first40.jsonl.gz"
EXIT_INTERRUPTED = 3
#: Defaults when no --model is given: the random tiny model only needs to run the pipeline, quickly.
TINY_DEFAULTS = dict(num_examples=2, num_documents=3, num_keys=4, max_new_tokens=8)
#: Defaults for real models (the Lost in the Middle settings).
MODEL_DEFAULTS = dict(num_documents=20, num_keys=75)

EPILOG = f"""\
data:
  mdqa   reads DATA_DIR/nq-open-oracle*.jsonl(.gz) (Lost in the Middle release). Without --data-dir
         it falls back to the 40-question test fixture {FIXTURE_NQ.relative_to(REPO_ROOT)}
         (a smoke test, not a benchmark).
  kv     reads DATA_DIR/kv-retrieval-<num_keys>_keys.jsonl(.gz) (an error if --data-dir lacks it); without
         --data-dir generates --num-examples examples of --num-keys random UUID pairs from --seed.
  other task parameters: --task-param TASK:key=value (e.g. mdqa_release:path=FILE).

methods: {", ".join(sorted(METHODS))}; NAME or NAME:key=value,...; stack with '+' (a+b:k=v).

without --model: a random tiny OLMo-2 with a byte tokenizer (answers are noise) and small
defaults {TINY_DEFAULTS}.

exit codes: 0 done, 2 usage error, 3 stopped early by --max-records (rerun to resume).
"""


def _gold_positions(text: str) -> str | list[int]:
    if text in GRID_NAMES:
        return text
    try:
        return [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected one of {list(GRID_NAMES)} or comma-separated 0-based ints, got {text!r}"
        ) from None


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", help="local HF model directory (default: the built-in tiny random model)")
    parser.add_argument("--tasks", default="mdqa", help=f"comma-separated tasks from {sorted(TASKS)} (default mdqa)")
    parser.add_argument(
        "--method",
        action="append",
        dest="methods",
        metavar="NAME[:k=v,...]",
        help="a method (stack) to evaluate; repeat for several (default: baseline)",
    )
    parser.add_argument("--out", required=True, help="output directory (resumes if it holds an earlier run)")
    parser.add_argument("--num-examples", type=positive_int, help="source examples per task (default: all)")
    parser.add_argument("--num-documents", type=positive_int, help="documents per MDQA prompt (default 20)")
    parser.add_argument("--num-keys", type=positive_int, help="KV pairs per prompt (default 75)")
    parser.add_argument(
        "--gold-positions",
        type=_gold_positions,
        default="caliope",
        help="caliope|lpes|all or comma-separated 0-based ints (default caliope)",
    )
    parser.add_argument("--batch-size", type=positive_int, default=8, help="prompts per forward (default 8)")
    parser.add_argument("--max-new-tokens", type=positive_int, help="default: per task (100)")
    parser.add_argument("--seed", type=int, default=0, help="seed of distractors / generated keys / tiny weights")
    parser.add_argument("--data-dir", help="folder with the Lost in the Middle files (see below)")
    parser.add_argument("--max-length", type=positive_int, help="prompt + new tokens budget (default: model's)")
    parser.add_argument("--truncate", choices=["middle", "left"], help="truncate too-long prompts (default: error)")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--attn-implementation", default="sdpa", help="sdpa, eager or flash_attention_2")
    parser.add_argument(
        "--device", default="auto", choices=list(DEVICES), help="auto = the GPU (LOCAL_RANK) when CUDA is present"
    )
    parser.add_argument("--task-param", action="append", default=[], metavar="TASK:key=value")
    parser.add_argument("--max-records", type=positive_int, help="stop after N new records (resume by rerunning)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.add_argument("--no-report", action="store_true", help="skip plots and report.md")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineArgumentParser(
        prog="python -m evaluation",
        description="Evaluate a model, with training-free position methods, on long-context tasks with the "
        "relevant item at each position; write per-example records, a summary, plots and a report.",
    )
    sub = parser.add_subparsers(dest="command")
    run_parser = sub.add_parser(
        "run", help="evaluate tasks × methods", epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_run_arguments(run_parser)
    report_parser = sub.add_parser("report", help="re-render plots and report.md from OUT/summary.json")
    report_parser.add_argument("--out", required=True, help="a run directory")
    report_parser.add_argument("--compare", action="append", default=[], help="another run directory to overlay")
    report_parser.add_argument(
        "--seeds",
        action="store_true",
        help="the runs (--out and every --compare) are seeds of one setup: add mean ± sample std over them",
    )
    summarize_parser = sub.add_parser(
        "summarize", help="rebuild OUT/summary.json from OUT/records.jsonl with this version's statistics"
    )
    summarize_parser.add_argument("--out", required=True, help="a run directory")
    summarize_parser.add_argument("--no-report", action="store_true", help="skip plots and report.md")
    return parser


def _find(data_dir: Path, pattern: str) -> Path | None:
    matches = sorted(p for p in data_dir.glob(pattern) if p.is_file())
    return matches[0] if matches else None


def task_params(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Each requested task's `build_task` parameters from the options (data files, defaults, --task-param)."""
    names = [name.strip() for name in args.tasks.split(",") if name.strip()]
    unknown = [name for name in names if name not in TASKS]
    if unknown or not names:
        raise ValueError(f"unknown task(s) {unknown or [args.tasks]}; choose from {sorted(TASKS)}")
    defaults = TINY_DEFAULTS if args.model is None else MODEL_DEFAULTS
    data_dir = Path(args.data_dir) if args.data_dir else None
    if data_dir is not None and not data_dir.is_dir():
        raise FileNotFoundError(f"--data-dir {str(data_dir)!r} is not a directory")
    extra: dict[str, dict[str, Any]] = {}
    for item in args.task_param:
        task, _, assignment = item.partition(":")
        key, eq, value = assignment.partition("=")
        if task not in names or not eq or not key:
            raise ValueError(f"bad --task-param {item!r}: write TASK:key=value with TASK one of {names}")
        extra.setdefault(task, {})[key] = parse_value(value)
    common = {"seed": args.seed, "gold_positions": args.gold_positions}
    num_examples = args.num_examples or defaults.get("num_examples")
    tasks: dict[str, dict[str, Any]] = {}
    for name in names:
        params: dict[str, Any] = {"num_examples": num_examples, **common}
        if name == "mdqa":
            path = _find(data_dir, "nq-open-oracle*.jsonl*") if data_dir else FIXTURE_NQ
            if path is None:
                raise FileNotFoundError(f"no nq-open-oracle*.jsonl(.gz) in --data-dir {str(data_dir)!r}")
            params.update(path=str(path.resolve()), num_documents=args.num_documents or defaults["num_documents"])
        elif name == "kv":
            keys = args.num_keys or defaults["num_keys"]
            path = _find(data_dir, f"kv-retrieval-{keys}_keys.jsonl*") if data_dir else None
            if data_dir is not None and path is None and "path" not in extra.get("kv", {}):
                raise FileNotFoundError(
                    f"no kv-retrieval-{keys}_keys.jsonl(.gz) in --data-dir {str(data_dir)!r}; pass the --num-keys "
                    "of a file there (the release has 75, 140 and 300), or drop --data-dir to generate examples"
                )
            params.update(path=str(path.resolve()) if path else None, num_keys=keys)
            if path is None and num_examples is None:
                raise ValueError("kv without a data file generates its examples: pass --num-examples N")
        fields = set(TASKS[name].field_names())  # common options only go to tasks that take them
        params = {k: v for k, v in params.items() if k in fields and v is not None}
        tasks[name] = {**params, **extra.get(name, {})}  # --task-param as given: a typo fails in build_task
    return tasks


def _run(args: argparse.Namespace) -> int:
    from evaluation.report import render_report
    from evaluation.runner import RunConfig, RunInterrupted, run

    methods = args.methods or ["baseline"]
    for spec in methods:
        MethodStack.parse(spec)  # a bad spec fails before any model is loaded
    if args.model is not None and not Path(args.model).is_dir():
        raise FileNotFoundError(f"--model {args.model!r} is not a directory; pass a local HF model directory")
    max_new = args.max_new_tokens or (TINY_DEFAULTS["max_new_tokens"] if args.model is None else None)
    config = RunConfig(
        out=args.out,
        tasks=task_params(args),
        methods=methods,
        model=args.model,
        seed=args.seed,
        batch_size=args.batch_size,
        max_new_tokens=max_new,
        max_length=args.max_length,
        truncate=args.truncate,
        dtype=args.dtype,
        attn_implementation=args.attn_implementation,
        device=args.device,
    )
    if args.model is None:
        print(
            f"no --model: the built-in tiny random model; defaults for options not given: {TINY_DEFAULTS}",
            file=sys.stderr,
        )
    try:
        summary = run(config, max_records=args.max_records, progress=not args.no_progress)
    except RunInterrupted as stop:
        print(f"python -m evaluation run: {stop}", file=sys.stderr)
        return EXIT_INTERRUPTED
    for task, by_method in summary["results"].items():
        for method, result in by_method.items():
            print(f"{task:12s} {method:24s} n={result['n']:<5d} accuracy={result['accuracy']:.3f}")
    if not args.no_report:
        paths = render_report(args.out)
        print(f"report: {paths[-1]}")
    return 0


def _report(args: argparse.Namespace) -> int:
    from evaluation.report import render_report

    paths = render_report(args.out, args.compare, seeds=args.seeds)
    print("\n".join(str(p) for p in paths))
    return 0


def _summarize(args: argparse.Namespace) -> int:
    from evaluation.report import render_report
    from evaluation.results import resummarize

    summary = resummarize(args.out)
    print(f"{Path(args.out) / 'summary.json'}: format_version {summary['format_version']}")
    if not args.no_report:
        print("\n".join(str(p) for p in render_report(args.out)))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    action = {"run": _run, "report": _report, "summarize": _summarize}[args.command]
    # user mistakes: one clear line, no traceback
    return report_user_errors(f"python -m evaluation {args.command}", lambda: action(args), (ValueError, OSError))
