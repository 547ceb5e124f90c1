"""`python -m search`: run an LPES search (`run`), check and print a scale file (`show`), or `diagnose` one;
`positional-dims` searches a model's positional channels for PositionalHidden (its options:
search/positional_dims_options.py).

This module parses and checks the options; the work is search/search_run.py, search/show.py,
search/structure.py and search/positional_dims.py, imported only after that.

`run` writes, next to `--out scales/NAME.json`:

    NAME.json          the scale file (search/scale_file_writer.py), what evaluation applies
    NAME.log.jsonl     one line per generation: best, mean, diversity, time, ...
    NAME.curve.png     the per-layer scales with the control points
    NAME.fitness.png   fitness over generations
    NAME.state.json    the GA state after every generation (`--resume` continues it)
    NAME.lock          while the search runs: its pid and host (repo_common/run_lock.py); a second
                       search with the same --out is refused until this one ends

Under torchrun every rank loads the model and runs the same GA; the fitness
splits the prompts across ranks (search/harness_fitness.py) and only rank 0
writes files (search/search_run.py). User mistakes end with one line on stderr and exit code 2.
"""

from __future__ import annotations

import sys

from jsonargparse import Namespace
from jsonargparse.typing import PositiveInt

from evaluation.run_config import check_tiny_default_options
from repo_common import user_code
from repo_common.config_cli import ConfigParser, dataclass_config, deferred, dispatch, dump_config
from repo_common.model_directory import check_model_files
from search.config import add_run_command, add_search_sections, config_from_options
from search.outputs import check_search_outputs
from search.positional_dims_options import PositionalDims, check_outputs
from search.positional_dims_options import add_arguments as _add_positional_dims
from search.search_task import task_data_file

EPILOG = """\
configs: configs/search/lpes.yaml (paper defaults), lpes-vicuna-mdqa10.yaml (32 layers, 10 MDQA documents),
  lpes-qwen-kv50.yaml (28 layers, 50 KV pairs), tiny.yaml (the tiny random model, seconds on a CPU).
  Without --config: the paper defaults with --model.path, tiny.yaml without. Any key can be set on the
  command line too, spelt as in the file (--model.path DIR, --task.name kv, --task.num_items 10,
  --ga.population 12); --print_config prints the resolved config, which the search also writes as
  NAME.config.yaml (--config NAME.config.yaml replays it). docs/configuring.md.
data: mdqa reads DATA_DIR/nq-open-oracle*.jsonl(.gz) (Lost in the Middle release; without a data dir, the
  packaged 40-question sample in evaluation/data/lost_in_the_middle); kv reads
  DATA_DIR/kv-retrieval-<k>_keys.jsonl(.gz) or generates UUID pairs.
distributed: python -m torch.distributed.run --nproc_per_node=N -m search run ...  (scripts/run_search.sh)
resume: rerun the same command with --resume; it continues NAME.state.json (or starts if there is none).
"""

#: The commands' work, imported only once the options are parsed and checked (`deferred`): torch, the harness
#: and the model stay out of `--help` and of every refusal that needs no model.
_run_search = deferred("search.search_run", "run_search")
_diagnose_scales = deferred("search.structure", "diagnose")
_positional_dims_search = deferred("search.positional_dims", "command")


def _add_run(parser: ConfigParser) -> None:
    parser.epilog = EPILOG
    add_run_command(parser, out_required=True)  # the parser `search.config.search_parser` builds for the API


def _run(options: Namespace, parser: ConfigParser) -> int:
    if options.out is not None or not options.print_config:  # --print_config alone prints `out: null` to fill in
        check_search_outputs(options.out, options.resume)  # a bad or foreign --out fails before anything is loaded
    config = config_from_options(parser, options)
    if config.model.path is None:  # --model.dtype / attn_implementation would be ignored by the tiny default
        check_tiny_default_options(config.model.dtype, config.model.attn_implementation, "--model.")
    if getattr(parser, "tiny_defaults", False):
        print(
            "no --model and no --config: the built-in tiny random model with configs/search/tiny.yaml", file=sys.stderr
        )
    model = config.model.path
    if model is not None:  # config.json and tokenizer files, before torch: a hub id gets the download hint
        check_model_files("--model.path", model)
    task_data_file(config.task)  # a missing data folder or file: what to download, before the model loads
    imports = list(options.get(user_code.KEY) or [])  # the user's modules (a task): a replay imports them first
    text = dump_config(
        {
            **({user_code.KEY: imports} if imports else {}),
            **config.to_dict(),
            "out": options.out,
            "resume": options.resume,
            "no_progress": options.no_progress,
        }
    )
    if options.print_config:
        print(text, end="")
        return 0
    _run_search(config, options.out, resume=options.resume, progress=not options.no_progress, config_text=text)
    return 0


def _add_diagnose(parser: ConfigParser) -> None:
    parser.description = (
        "D per layer and S of the searched scales and of uniform / noisy / shuffled / random variants, on the "
        "search set of the config's task; writes OUT/structure.json and OUT/structure.png (search/structure.py)."
    )
    add_search_sections(parser)
    parser.add_import_option()  # a user's task, as in run
    parser.spelling_hints["--seed"] = "--variant_seed"
    parser.add_argument("--scale_file", type=str, required=True, help="a scale file of `python -m search run`")
    parser.add_argument("--out", type=str, required=True, help="directory for structure.json and structure.png")
    parser.add_argument("--variant_seed", type=int, default=0, help="seed of noisy/shuffled/random")


def _diagnose(options: Namespace, parser: ConfigParser) -> int:
    _diagnose_scales(config_from_options(parser, options), options.scale_file, options.out, seed=options.variant_seed)
    return 0


def _add_show(parser: ConfigParser) -> None:
    parser.add_argument("scale_file", type=str, help="the scale file")
    parser.add_argument("--num_layers", type=PositiveInt | None, help="also check the layer count")


def _positional_dims(options: Namespace, parser: ConfigParser) -> int:
    config = dataclass_config(options, PositionalDims)  # a refused value: one line, before torch loads
    check_model_files("--model", config.model)
    check_outputs(config)
    return _positional_dims_search(config)


COMMANDS = {
    "run": ("run (or resume) a search", _add_run, _run),
    "show": ("validate a scale file and print it", _add_show, deferred("search.show", "command")),
    "diagnose": (
        "structure deviation D and smoothness S of a scale file and its variants (search/structure.py)",
        _add_diagnose,
        _diagnose,
    ),
    "positional-dims": (
        "PositionalHidden's search of a model's positional hidden-state channels; writes its config file",
        _add_positional_dims,
        _positional_dims,
    ),
}


def main(argv: list[str] | None = None) -> int:
    # user mistakes (ConfigError, ScaleFileError are ValueErrors): one clear line, no traceback
    return dispatch(
        "python -m search",
        "LPES: search one RoPE scaling factor per layer of a frozen model with a Bézier-constrained genetic "
        "algorithm scored by the evaluation harness, and write a scale file.",
        COMMANDS,
        argv,
        resolves_config={"run"},
    )
