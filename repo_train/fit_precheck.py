"""`fit` / `validate` refusals that need no model, in about a second: LightningCLI's options kept on file.

LightningCLI imports torch and Lightning before it parses anything (~20 s on
two loaded cores), so a misspelt option cost as long as a real start. The
options of its `fit` and `validate` parsers (name, type, default) are kept in
help_snapshot.json beside the help, under the same key (the sources and
package versions, `repo_train.help_snapshot`). From them a jsonargparse parser
of the same options is rebuilt here, importing nothing heavy, and refuses:

- what the parser refuses: an unknown option, a value of the wrong type, a
  config file that is missing, not YAML, not a mapping of sections, or too big;
- the settings checks that need no model (`training.settings_checks`): a root
  dir that is a file or holds an earlier run, `checkpoint.every_n_train_steps`
  below 1, a global batch the micro batch does not divide (one process), a
  `--ckpt_path` that does not exist, `validate` with nothing to validate.

It refuses only what the live command refuses, in the same line (the slow
tests/test_fit_precheck.py runs both). With several problems at once it may
name another of them first: the live command checks the Trainer's settings and
builds the model before it looks at the root dir. What it cannot judge exactly goes to
the live command unjudged: an option inside a class-typed key (a data
source's, a position's, a callback's), a whole section given as a file,
`--import`, the old option names, a key the snapshot does not hold, or a
snapshot of other sources. `REPO_TRAIN_LIVE=1` skips it. Stdlib, yaml and
jsonargparse only.
"""

from __future__ import annotations

import argparse
import json
import os
import types
import typing
from pathlib import Path
from typing import Any

from jsonargparse import ActionConfigFile, ArgumentParser

from repo_common import user_code
from repo_common.file_permissions import describe
from repo_common.run_lock import LOCK_FILE
from repo_train import help_snapshot
from repo_train.checkpoints import LIGHTNING_CKPT_ALIASES, missing_checkpoint_message
from repo_train.training import settings_checks
from repo_train.training.parse_errors import parse_error_line

#: The subcommands whose parsers are kept (the ones `python -m repo_train` routes to LightningCLI).
SUBCOMMANDS = ("fit", "validate")
#: Value types kept exactly; an option of any other type (a class, a list, a path, a Literal) takes any value here
#: as given (`as_given`).
SIMPLE_TYPES = {"int": int, "float": float, "bool": bool, "str": str, "None": type(None)}
#: Arguments that ask the live command something (help, the resolved config, code to import).
LIVE_ONLY = ("-h", "--help", "--print_config", "--print_shtab", "--import")


# ------------------------------------------------------------------ the snapshot side (needs the live parser)


def type_names(hint: Any) -> list[str] | None:
    """A type hint as the names of its members when each is a plain int/float/bool/str/None, else None."""
    members = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    names = []
    for member in members:
        name = next((n for n, t in SIMPLE_TYPES.items() if member is t), None)
        if name is None:
            return None
        names.append(name)
    return names


def parser_options(parser: Any) -> dict:
    """What the fast parser needs of a live subcommand parser: {"options": {key: {"type": names or None,
    "default": value}}, "classes": class-typed keys, "sections": keys that also take a whole section}."""
    defaults = parser.get_defaults().as_dict()
    options, classes, sections = {}, [], []
    for action in parser._actions:
        kind = type(action).__name__
        if action.dest in ("help", "config", "print_config", "print_shtab") or not action.option_strings:
            continue
        if kind == "_ActionConfigLoad":
            sections.append(action.dest)
        elif kind == "_ActionHelpClassPath":
            classes.append(action.dest.removesuffix(".help"))
        else:
            default = _lookup(defaults, action.dest)
            try:
                json.dumps(default)
            except (TypeError, ValueError):
                default = {"not_kept": repr(default)}
            options[action.dest] = {"type": type_names(getattr(action, "_typehint", None)), "default": default}
    return {"options": options, "classes": sorted(classes), "sections": sorted(sections)}


def _lookup(tree: dict, key: str) -> Any:
    for part in key.split("."):
        tree = tree.get(part) if isinstance(tree, dict) else None
    return tree


# ------------------------------------------------------------------ the command side (nothing heavy)


def _kept_options(subcommand: str) -> dict | None:
    """The kept options of `subcommand` when the snapshot is of this checkout and these packages, else None."""
    entry = help_snapshot.current_entry(help_snapshot.PARSER, terminal=False)
    try:
        return entry["subcommands"][subcommand]
    except (KeyError, TypeError):
        return None


def _rebuilt_parser(subcommand: str, kept: dict) -> Any:
    """A parser of `python -m repo_train SUBCOMMAND ...` with the kept options: a subcommand's, as the live one
    (jsonargparse words some errors by where the option sits)."""
    parser = ArgumentParser(prog="python -m repo_train", exit_on_error=False)
    options = ArgumentParser(exit_on_error=False)
    options.add_argument("-c", "--config", action=ActionConfigFile)
    for key, option in kept["options"].items():
        names = option["type"]
        hint = typing.Union[tuple(SIMPLE_TYPES[n] for n in names)] if names else as_given  # noqa: UP007
        options.add_argument(f"--{key}", type=hint, default=option["default"])
    parser.add_subcommands().add_subcommand(subcommand, options)
    return parser


def as_given(value: Any) -> Any:
    """The type of an option whose value is not judged here: the value as given (a command line's text, a config's
    YAML). Not `typing.Any`, for which jsonargparse imports the module of any `class_path` in the value."""
    return value


def _null(value: Any) -> bool:
    """None, or a command line's spelling of it (the live parser reads `--ckpt_path null` as None)."""
    return value is None or (isinstance(value, str) and value.strip() in ("", "null", "Null", "NULL", "~", "None"))


def _judged_here(args: list[str], kept: dict, config_data: list[Any]) -> bool:
    """False for what only the live parser can judge exactly (see the module docstring)."""
    nested = tuple(f"--{key}." for key in kept["classes"])
    sections = {f"--{key}" for key in kept["sections"]}
    moved = {f"--model.{name}" for name in settings_checks.MOVED_MODEL_OPTIONS}
    for arg in args:
        option = arg.partition("=")[0]
        if not arg.startswith("-") or option in ("-c", "--config"):
            continue
        if option in LIVE_ONLY or option in sections or option in moved or option.startswith(nested):
            return False
        if "+" in option or option.endswith(".help"):  # appending to a list, a class's help
            return False
    for data in config_data:
        if not isinstance(data, dict):
            continue
        if user_code.KEY in data:
            return False
        for name in kept["sections"]:
            section = data.get(name)
            if isinstance(section, dict) and ({"class_path", "init_args"} & set(section)):
                return False
        model = data.get("model")
        if isinstance(model, dict) and set(settings_checks.MOVED_MODEL_OPTIONS) & set(model):
            return False
    return True


def refusal(argv: list[str]) -> str | None:
    """The one line `python -m repo_train fit|validate ARGV...` refuses with, or None: not refused here (the live
    command then runs, and may still refuse what needs the model, the data or Lightning)."""
    if not argv or argv[0] not in SUBCOMMANDS:
        return None
    subcommand, args = argv[0], argv[1:]
    kept = _kept_options(subcommand)
    if kept is None:
        return None
    try:
        config_data = settings_checks.read_config_files(settings_checks.config_file_arguments(args))
    except PermissionError as err:
        return describe(err)
    except ValueError as err:
        return str(err)
    if not _judged_here(args, kept, config_data):
        return None
    try:  # the class paths under model / data, before anything could import them (as live)
        for class_path in settings_checks.named_class_paths(args, config_data):
            user_code.check_class_path(class_path)
    except ValueError as err:
        return str(err)
    try:
        config = _rebuilt_parser(subcommand, kept).parse_args(argv)[subcommand].as_dict()
    except argparse.ArgumentError as err:
        return parse_error_line(str(err), subcommand)
    try:
        _check_settings(subcommand, config)
    except PermissionError as err:
        return describe(err)
    except (ValueError, FileNotFoundError) as err:
        return str(err)
    return None


def _check_settings(subcommand: str, config: dict) -> None:
    """The live command's model-free checks, in its order; a default the snapshot could not keep is not judged."""

    def value(key: str) -> Any:
        found = _lookup(config, key)
        if isinstance(found, dict) and "not_kept" in found:
            raise LookupError(key)
        return None if _null(found) else found

    try:
        ckpt_path, root = value("ckpt_path"), value("trainer.default_root_dir")
        if ckpt_path is not None and str(ckpt_path) not in LIGHTNING_CKPT_ALIASES and not Path(ckpt_path).exists():
            raise FileNotFoundError(missing_checkpoint_message(ckpt_path))
        if subcommand == "validate":
            settings_checks.check_validate_inputs(value("data.val"), ckpt_path, value("model.init_from"))
            return
        if not isinstance(root, str) or "://" in root:
            return  # the working directory (None), or remote: not searched, as live
        settings_checks.check_root_dir(root)
        if (Path(root) / LOCK_FILE).exists():
            return  # maybe a run in progress: the live command names its holder (not "resume it")
        settings_checks.check_no_earlier_run(root, ckpt_path)
        settings_checks.check_every_n_train_steps(value("checkpoint.every_n_train_steps"))
        one_process = value("trainer.devices") in (1, "1") and value("trainer.num_nodes") in (1, None)
        if one_process and "WORLD_SIZE" not in os.environ:
            settings_checks.batch_accumulation(value("data.global_batch_size"), value("data.micro_batch_size"), 1)
    except LookupError:
        return
