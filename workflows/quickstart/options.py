"""The quickstart's options and their checks: the built-in tiny loop's, or a loop file's sections.

    python -m workflows quickstart [--out outputs/quickstart] [--steps 10] [--print_config]
    python -m workflows quickstart --config configs/quickstart/olmo2-1b.yaml [--out DIR] [--dry_run]

Without a loop file, on the CPU, on the built-in base workflows/assets/tiny-kv-dip (a
4-layer RoPE OLMo-2 that retrieves at the edges of a 64-pair context and loses
the middle; scripts/make_tiny_dip_base.py):

1. continues the shipped pair workflows/assets/tiny-kv-dip-continued (the base
   continued for 600 steps with RoPE and with REPO on the same data:
   scripts/make_tiny_repo_pair.py; REPO's positions need hundreds of steps to
   spread, more than a CPU budget) for --steps more steps each on fresh KV
   streams, with the real Lightning path, and exports both as HF directories.
   With another --base (or --pair none) both start from the base instead, REPO
   from fresh predictors along a curriculum from the base's RoPE positions;
2. runs an LPES search on the base and writes a scale file;
3. evaluates on the base, with held-out prompts and the gold pair at 8
   positions: baseline, LPES, PI at the mean scale, CALIOPE with context-sized
   and with published gaps, PCD, and Found in the Middle on fewer questions
   (one extra prefill per pair); then the two continued models' baselines;
4. writes one report directory: README.md (a results table with Δ, CIs, Holm
   p and verdict words; commands), the plots, the scale file, the checkpoints.

With a loop file (--config) the same loop runs at full scale: an OLMo-2 checkpoint
directory, the train configs' data, the launchers the file names
(scripts/launch_train.sh, scripts/run_search.sh), the evaluation it lists; the
file is documented key by key in configs/quickstart/olmo2-1b.yaml and checked
before any step runs (workflows/loop_config.py). --dry_run writes and prints
OUT/commands.sh and runs nothing: read it before spending GPU hours.

Every step is one of the project's commands, run as a subprocess and
written into OUT/commands.sh, so each can be rerun alone or at full scale.
Relative paths (--out, --config) are taken from the checkout in a development
install, from the current directory otherwise.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from jsonargparse import Namespace
from jsonargparse.typing import PositiveInt

from repo_common.config_cli import ConfigParser, deferred, dump_config, take_flag
from search.cli import COMMANDS as SEARCH_COMMANDS
from search.config import SearchConfig, config_from_options
from workflows import loop_config
from workflows.assets import TINY_KV_DIP, TINY_KV_DIP_CONTINUED
from workflows.commands import project_root

PROG = "python -m workflows quickstart"
#: Where every step runs and relative paths are taken from.
ROOT = project_root()
#: The built-in base: a tiny RoPE OLMo-2 that retrieves at the edges of a 64-pair context and loses the middle.
BASE = TINY_KV_DIP
#: The base continued with RoPE (rope/) and REPO (repo/) on the same data for the same steps (pair.json says how
#: many): the built-in loop continues these, so that its REPO model has learned positions (make_tiny_repo_pair.py).
PAIR = TINY_KV_DIP_CONTINUED
#: Options of the built-in tiny loop; a loop file (train/search/evaluate sections) sets the run, so they are refused.
TINY_OPTIONS = ("steps", "lr", "eval_examples", "fim_examples", "generations", "population", "pair")
#: A loop file's checks that load fit's parser and the harness (workflows/loop_checks.py): imported only once a
#: loop file is given, so `--help` stays fast.
_check_training = deferred("workflows.loop_checks", "check_training")
_check_evaluations = deferred("workflows.loop_checks", "check_evaluations")


def add_arguments(parser: ConfigParser) -> None:
    """The quickstart's options; a loop file (configs/quickstart/*.yaml) sets `base` and the three sections."""
    parser.description = __doc__
    parser.before_parse = _from_root
    parser.add_argument(
        "--out",
        type=str | None,
        help="report directory (created; default outputs/quickstart, outputs/quickstart-NAME for --config NAME.yaml)",
    )
    parser.add_argument(
        "--dry_run", action="store_true", help="loop file only: write and print commands.sh, run nothing"
    )
    parser.add_argument("--base", type=str | None, help="HF directory to continue from (default: the built-in)")
    loop = "loop file only"
    parser.add_argument("--gpus", type=PositiveInt | None, help=f"GPUs of the node: processes per step ({loop})")
    parser.add_argument("--data_dir", type=str | None, help=f"the Lost in the Middle release's qa_data folder ({loop})")
    tiny = "built-in tiny loop only"
    parser.add_argument("--steps", type=PositiveInt, default=10, help=f"continual-training steps per model ({tiny})")
    parser.add_argument("--lr", type=float, default=1e-3, help=f"peak learning rate ({tiny})")
    parser.add_argument(
        "--pair",
        type=str | None,
        help=f"the RoPE/REPO pair to continue, DIR/rope and DIR/repo, or none: both start from --base, REPO's "
        f"predictors fresh (default: the shipped {PAIR.name} with the built-in base, else none; {tiny})",
    )
    parser.add_argument("--eval_examples", type=PositiveInt, default=50, help=f"questions per position ({tiny})")
    parser.add_argument("--fim_examples", type=PositiveInt, default=3, help=f"FiM's questions per position ({tiny})")
    parser.add_argument("--generations", type=int, default=2, help=f"LPES breeding rounds ({tiny})")
    parser.add_argument("--population", type=PositiveInt, default=8, help=f"LPES population ({tiny})")
    parser.add_argument("--train", type=loop_config.TrainSection | None, help="loop file: the training runs")
    parser.add_argument("--search", type=loop_config.SearchSection | None, help="loop file: the LPES search")
    parser.add_argument("--evaluate", type=loop_config.EvaluateSection | None, help="loop file: the harness runs")


def build_parser() -> ConfigParser:
    parser = ConfigParser.for_command(PROG, __doc__)
    add_arguments(parser)
    return parser


def _from_root(parser: ConfigParser, argv: list[str]) -> None:
    """Relative --config paths are taken from ROOT (where every step runs), from any directory; the flags given
    are kept for `resolve` (a loop file refuses the tiny loop's options only when given)."""
    parser.given_flags = {a.split("=")[0] for a in argv}
    try:
        files, rest = take_flag(argv, "--config")
    except ValueError:
        return  # the parser names the mistake
    argv[:] = [arg for path in files for arg in ("--config", str(ROOT / path))] + rest  # ROOT / absolute = absolute


def parse_args(argv: list[str] | None = None) -> Namespace:
    """The options as the command takes them, checked by `resolve`."""
    parser = build_parser()
    args, show = parser.parse(list(sys.argv[1:] if argv is None else argv))
    args.print_config = show
    return resolve(args, parser)


def resolve(args: Namespace, parser: ConfigParser) -> Namespace:
    """The checked options; in loop-file mode `args.loop` is the checked `LoopConfig` (else None). Mistakes: one
    line, exit 2; `--print_config` prints what will run and exits 0."""
    files = [str(path) for path in args.config or []]
    sections = {name: args[name] for name in ("train", "search", "evaluate")}
    args.loop = None
    if not any(sections.values()):
        if args.dry_run:
            parser.fail("--dry_run needs a loop file (--config FILE; the built-in loop writes commands.sh as it runs)")
        given = [f"--{name}" for name in ("gpus", "data_dir") if args[name] is not None]
        if given:
            parser.fail(f"{', '.join(given)}: loop file only (--config FILE); the built-in loop runs on the CPU")
        builtin_base = args.base is None or Path(args.base).resolve() == BASE
        args.base = args.base or str(BASE)
        args.out = "outputs/quickstart" if args.out is None else args.out  # `--out ''` is refused by the command
        if args.pair is None:
            args.pair = str(PAIR) if builtin_base else "none"
        if args.pair != "none" and not all((Path(args.pair) / m / "config.json").is_file() for m in ("rope", "repo")):
            parser.fail(f"--pair {args.pair}: needs rope/ and repo/ HF directories (scripts/make_tiny_repo_pair.py)")
    else:
        name = (
            (Path(files[-1]).relative_to(ROOT) if Path(files[-1]).is_relative_to(ROOT) else files[-1])
            if files
            else "the loop"
        )
        missing = [key for key, value in {"base": args.base, **sections}.items() if value is None]
        if missing:
            parser.fail(f"{name}: missing {', '.join(missing)}; a loop file sets base, train, search and evaluate")
        given = sorted(f"--{o}" for o in TINY_OPTIONS if f"--{o}" in parser.given_flags)
        if given:
            parser.fail(f"{', '.join(given)}: built-in tiny loop only; with a loop file the file sets the run")
        try:
            built = parser.instantiate(args)
            args.loop = loop_config.LoopConfig(
                built.base, built.train, built.search, built.evaluate, path=str(name), gpus=args.gpus or 1,
                data_dir=args.data_dir,
            )  # fmt: skip
            loop_config.check_files(args.loop, ROOT)
            args.training_plans = _check_training(args.loop, ROOT)  # each train config as `fit` parses it
            _check_evaluations(args.loop)  # every method, task and option the evaluations will pass
            search_config(args.loop)  # the search's config and args as `search run` builds them
        except ValueError as err:
            parser.fail(f"{name}: {err}")
        args.out = f"outputs/quickstart-{Path(files[-1]).stem}" if args.out is None else args.out
        args.config_name = str(name)
    if args.print_config:
        print(dump_config(resolved_config(args)), end="")
        raise SystemExit(0)
    return args


def resolved_config(args: Namespace) -> dict:
    """What will run, as a loop file (loop mode) or the tiny loop's options: --print_config's output."""
    head = {"out": args.out, "base": args.base}
    if args.loop is None:
        return {**head, **{name: args[name] for name in TINY_OPTIONS}}
    loop = args.loop
    sections = {name: dataclasses.asdict(getattr(loop, name)) for name in ("train", "search", "evaluate")}
    return {**head, "gpus": loop.gpus, "data_dir": loop.data_dir, **sections, "dry_run": args.dry_run}


def search_config(config: loop_config.LoopConfig) -> SearchConfig:
    """The search's config file with `search.args`, parsed and built as `python -m search run` does (also in a
    dry run), so a typo fails now and not after training, and the examples it uses (`--held_out.num_examples`
    and the like in search.args included) decide where the evaluations start; its model and data directory are
    checked elsewhere."""
    stand_in = dict.fromkeys(loop_config.PLACEHOLDERS, "1")
    argv = ["--config", str(ROOT / config.search.config), *(loop_config.fill(a, stand_in) for a in config.search.args)]
    if "--task.data_dir" in argv:  # the data directory exists only on the GPU machine (`machine_problems`)
        at = argv.index("--task.data_dir")
        del argv[at : at + 2]
    help_text, add_options, _ = SEARCH_COMMANDS["run"]
    parser = ConfigParser.for_command("python -m search run", help_text)
    add_options(parser)
    try:
        return config_from_options(parser, parser.parse_or_raise([*argv, "--out", "unused.json"]))
    except ValueError as err:
        raise loop_config.LoopConfigError(f"search.config / search.args: {err}") from None
