"""The one way every command line of the project is configured: jsonargparse, as LightningCLI does for training.

Each command (`python -m evaluation run`, `python -m search run`,
`python -m workflows quickstart`, the scripts through `parse_script`) declares
typed options on a `ConfigParser`, so it accepts the same three things:

- `--config FILE.yaml` (keys are the option names with underscores; later
  `--config` files and options override earlier ones),
- options on the command line, each spelt as its config key (`--batch_size 4`;
  `--batch-size` is refused naming `--batch_size`), dotted for nested keys
  (`--ga.population 12`); a list option named in `repeatable` also takes its
  items one at a time (`--methods a --methods b`),
- `--print_config`, which prints the *resolved* configuration (what the run
  will do, every default filled in) and exits; the same text is stored in the
  run's output directory as `config.yaml`, so `--config OUT/config.yaml`
  replays the run.

jsonargparse checks types, choices and unknown keys; its messages are
multi-line, so `ConfigParser.parse` turns them into the project's one-line
`PROG: error: ...` (exit code 2), as `repo_common.cli_errors` promises.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import io
import json
import re
import sys
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from jsonargparse import ActionConfigFile, ArgumentParser, DefaultHelpFormatter, Namespace, set_parsing_settings
from jsonargparse.typing import restricted_number_type

from repo_common import user_code
from repo_common.cli_errors import EXIT_USAGE, report_user_errors
from repo_common.file_permissions import permission_message

PRINT_CONFIG = "--print_config"
#: jsonargparse's restricted number types, as the one-line error names them.
RESTRICTED_TYPES = {
    "PositiveInt": "a positive integer",
    "NonNegativeInt": "an integer >= 0",
    "PositiveFloat": "a positive number",
    "NonNegativeFloat": "a number >= 0",
    "ClosedUnitInterval": "a number in [0, 1]",
    "OpenUnitInterval": "a number in (0, 1)",
    "Seed": "an integer seed in [0, 2**32)",
}
#: A random seed every library takes (numpy's bound; torch's is wider).
SEED_LIMIT = 2**32
Seed = restricted_number_type("Seed", int, [(">=", 0), ("<", SEED_LIMIT)], join="and")


def one_line_error(message: str) -> str:
    """jsonargparse's multi-line error as one readable line: the key, the first real complaint, the given value."""
    lines = [line.strip() for line in str(message).splitlines() if line.strip()]
    if not lines:
        return "invalid configuration"
    head = lines[0]
    key = re.match(r'Parser key "([^"]+)":?\s*(.*)', head)
    required = re.fullmatch(r"the following arguments are required: ([\w., ]+)", head)
    if key is None and required is not None:
        return "missing option " + ", ".join(f"--{name.strip()}" for name in required.group(1).split(","))
    if key is None and head.startswith("Does not validate against any of the Union subtypes"):
        union = [line[2:] for line in lines[1:] if line.startswith("- ") and "NoneType" not in line]
        if union:  # a section that may be null (`ga.racing`): the section's own complaint, not the union's
            return union[0]
    if key is None:
        return " ".join(lines)
    name, rest = key.group(1), key.group(2)
    complaints: list[str] = []  # each "- ..." item of a union's errors, with its continuation lines
    for line in lines[1:]:
        if line.startswith("- "):
            complaints.append(line[2:])
        elif complaints and not line.startswith("Given value"):
            complaints[-1] += " " + line
    complaints = [c for c in complaints if "NoneType" not in c] or complaints
    # the alternative the value was meant for (a class_path that failed) says more than "Expected a str"
    complaints.sort(key=lambda c: not c.startswith("Problem with given class_path"))
    given = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("Given value:")), None)
    if complaints:
        text = complaints[0]
    else:
        text = " ".join([rest, *[line for line in lines[1:] if not line.startswith("Given value")]]).strip()
    text = text.replace("<class '", "").replace("'>", "").replace("typing.", "")
    nested = re.match(
        r"Problem with given class_path '[^']+': (Parser key \"[^\"]+\".*|Option '\w+' is not accepted"
        r"|the following arguments are required: [\w, ]+)",
        text,
    )
    if nested is not None:  # a key inside a class or dataclass section: name it by its dotted path
        inner = nested.group(1)
        option = re.match(r"Option '(\w+)' is not accepted", inner)
        if option is not None:
            return f"unknown key '{name}.{option.group(1)}'"
        required = re.match(r"the following arguments are required: ([\w, ]+)", inner)
        if required is not None:
            keys = [f"'{name}.{key.strip()}'" for key in required.group(1).split(",")]
            return f"missing key {', '.join(keys)}"
        return one_line_error(inner.replace('Parser key "', f'Parser key "{name}.', 1))
    expected = re.match(r"Expected an? (.+?)(?:\. Got value: (.*))?$", text)
    if expected is not None:
        kind, value = expected.group(1), expected.group(2) if expected.group(2) is not None else given
        literal = re.fullmatch(r"Literal\[(.*)\]", kind)
        kind = f"one of [{literal.group(1)}]" if literal else kind
        text, given = f"expected {kind}, got {value!r}", None
    restricted = re.match(r"Not of type (\w+): (.*)", text)
    if restricted is not None and restricted.group(1) in RESTRICTED_TYPES:
        detail = restricted.group(2)
        value = detail.split("does not conform")[0].strip() if "does not conform" in detail else ""
        if not value and given is None:  # "invalid literal for int() with base 10: 'x'": the value is its end
            given = detail.rsplit(": ", 1)[-1].strip("'\"")
        text, given = f"expected {RESTRICTED_TYPES[restricted.group(1)]}, got {value or repr(given)}", None
    if given is not None and given not in text:
        text += f" (got {given!r})"
    return f"option --{name}: {text}"


class _HelpFormatter(argparse.RawDescriptionHelpFormatter, DefaultHelpFormatter):
    """jsonargparse's help (types, defaults), with the description and epilog kept as written."""


class ConfigParser(ArgumentParser):
    """A jsonargparse parser with `--config`, one-line errors and a resolved `--print_config`."""

    def __init__(self, *args: Any, **kwargs: Any):
        kwargs.setdefault("exit_on_error", False)
        super().__init__(*args, **kwargs)
        #: List options that also take one item per occurrence (`--methods a --methods b`; see `parse`).
        self.repeatable: tuple[str, ...] = ()
        #: Spellings this command does not take -> the option to write instead (`--method` -> `--methods`).
        self.spelling_hints: dict[str, str] = {}
        #: Called with the command line before parsing, e.g. to choose defaults.
        self.before_parse: Callable[[ConfigParser, list[str]], None] | None = None
        #: Whether `--import MODULE` is an option (`add_import_option`), and the modules it imported.
        self.takes_user_code = False
        self.user_modules: list[str] = []
        #: Called with each class_path a config or the command line gives, after the checks, so that a lazily
        #: loaded built-in class can be named by its bare class name (jsonargparse finds only loaded subclasses).
        self.class_path_loaders: list[Callable[[str], None]] = []
        #: Option -> the class path of a registered short name, so `--methods.help pcd` works as the class path
        #: does (jsonargparse's `--X.help` knows class paths only); None: leave the value; ValueError: refuse.
        self.help_names: dict[str, Callable[[str], str | None]] = {}
        #: The dataclass whose fields are the options (`add_dataclass_options`), built by `typed_options`.
        self.config_class: type | None = None

    def add_import_option(self) -> None:
        """`--import MODULE` (repeatable, or `import: [...]` in a config file): the user's own modules, imported
        before parsing so their classes can be named; any other class_path outside the project is refused."""
        self.takes_user_code = True
        user_code.add_import_argument(self)

    def _import_user_code(self, args: list[str]) -> list[str]:
        """Import the modules named by `--import` and the config files' `import:` lists, then refuse every
        class_path (files and command line) outside them and the project, before jsonargparse imports any."""
        named, rest = self._take(args, user_code.FLAG)
        files, _ = self._take(rest, "--config")
        data = [yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {} for path in files]
        from_files = [name for item in data for name in (item.get(user_code.KEY) or [])]
        names = user_code.split_names([*from_files, *named])
        try:
            user_code.import_user_modules(names)
            self.user_modules = [user_code.module_name_of(name) for name in names]
            for class_path in [*user_code.class_paths_in(data), *user_code.class_paths_in_args(rest)]:
                user_code.check_class_path(class_path, self.user_modules)
                for load in self.class_path_loaders:
                    load(class_path)
        except ValueError as err:
            self.fail(str(err))
        return rest + ([user_code.FLAG, json.dumps(names)] if named else [])

    @classmethod
    def for_command(cls, prog: str, description: str) -> ConfigParser:
        """A command's parser: its `--config FILE` option first (jsonargparse builds inner parsers of this class too)."""
        parser = cls(prog=prog, description=description, formatter_class=_HelpFormatter)
        parser.add_argument("--config", action=ActionConfigFile, help="a YAML file of these options (repeatable)")
        return parser

    def _config_files_first(self, args: list[str]) -> list[str]:
        """Every `--config FILE` moved before the other options (so options override files, in any order),
        each file checked; an empty file sets nothing."""
        files, rest = self._take(args, "--config")
        used = []
        for path in files:
            ok, problem = _config_file_ok(path)
            if problem:
                self.fail(problem)
            if ok:
                used += ["--config", path]
        return used + rest

    def _take(self, args: list[str], flag: str) -> tuple[list[str], list[str]]:
        """`take_flag` with its mistake as this parser's one-line error."""
        try:
            return take_flag(args, flag)
        except ValueError as err:
            self.fail(str(err))

    def explain(self, message: str) -> str:
        """jsonargparse's error as the one line `fail` prints (an unknown key lists its section's valid keys)."""
        text = one_line_error(message)
        unknown = re.match(r"Group '([\w.]+)' does not accept option '(\w+)'", text)
        if unknown is not None:  # name the valid keys of that section, as a typo needs
            group, key = unknown.groups()
            valid = [a.dest.split(".")[-1] for a in self._actions if a.dest.startswith(group + ".")]
            text = f"unknown key '{group}.{key}' in {group}; valid keys are {valid}"
        return text

    def fail(self, message: str):
        """Stop with one line on stderr and exit code 2 (see `one_line_error`)."""
        text = self.explain(message)
        print(f"{self.prog}: error: {text} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)

    @contextlib.contextmanager
    def _nothing_required(self):
        """While parsing for `--print_config`: required options and positionals may be missing (printed as null), so
        the printed YAML is a template to fill in; given values are still checked."""
        changed = [(action, action.required, action.nargs) for action in self._actions if action.required]
        for action, _, nargs in changed:
            action.required = False
            if not action.option_strings and nargs is None:  # a positional: optional only this once
                action.nargs = "?"
        try:
            yield
        finally:
            for action, required, nargs in changed:
                action.required, action.nargs = required, nargs

    def parse_or_raise(self, argv: Sequence[str]) -> Namespace:
        """`parse`, for checking another command's options from inside a script: its one-line error raised as a
        ValueError (the message without `prog: error:`) instead of printed with exit 2."""
        errors = io.StringIO()
        try:
            with contextlib.redirect_stderr(errors):
                return self.parse(argv)[0]
        except SystemExit:
            lines = errors.getvalue().strip().splitlines() or ["not valid"]
            message = lines[-1].split("error: ", 1)[-1].removesuffix(f" (see {self.prog} --help)")
            raise ValueError(message) from None

    def parse(self, argv: Sequence[str] | None) -> tuple[Namespace, bool]:
        """(options, whether --print_config was given).

        Each option of `repeatable` (a list) may be given several times, each occurrence one item or a list
        (`--methods baseline --methods '[pi:scale=2, ms_poe]'`); together, in order, they replace the option's
        value from the config files.
        """
        args = list(sys.argv[1:] if argv is None else argv)
        show = PRINT_CONFIG in args
        args = [a for a in args if a != PRINT_CONFIG]
        self._refuse_other_spellings(args)
        if self.before_parse is not None:
            self.before_parse(self, args)
        args = self._config_files_first(args)
        if self.takes_user_code:
            args = self._import_user_code(args)
        try:  # after --import: a user's own method or task is a name too
            args = self._help_names_as_class_paths(args)
        except ValueError as err:
            self.fail(f"{err}")
        for dest in self.repeatable:
            values, args = self._take(args, f"--{dest}")
            args += [f"--{dest}", json.dumps(self._list_items(dest, values))] if values else []
        try:
            with self._nothing_required() if show else contextlib.nullcontext():
                options = self.parse_args(args)
        except (argparse.ArgumentError, TypeError, ValueError) as err:  # type checks of options and config files
            self.fail(str(err))
        for key, value in list(options.items()):  # PositiveInt & co. as plain numbers (YAML and JSON writers)
            if (
                type(value) not in (int, float, bool)
                and isinstance(value, (int, float))
                and not isinstance(value, bool)
            ):
                options[key] = int(value) if isinstance(value, int) else float(value)
        return options, show

    def _list_items(self, dest: str, values: list[str]) -> list[Any]:
        """The occurrences of a repeatable option as one list: a `[...]` value is a YAML list of items."""
        items: list[Any] = []
        for value in values:
            if not value.lstrip().startswith("["):
                items.append(value)
                continue
            try:
                items += yaml.safe_load(value)
            except yaml.YAMLError:
                self.fail(f"option --{dest}: {value!r} is not a YAML list; give one item per --{dest}, or [A, B]")
        return items

    def _is_option(self, flag: str) -> bool:
        """Whether `flag` is an option of this parser, or a key inside one (`--ga.racing.resamples`)."""
        return any(
            flag == option or flag.startswith(option + ".")
            for option in (*self._option_string_actions, *(f"--{dest}" for dest in self.repeatable), PRINT_CONFIG)
        )

    def _refuse_other_spellings(self, args: list[str]) -> None:
        """One spelling per option, its config key: `--batch-size` is refused naming `--batch_size`, and each flag
        of `spelling_hints` naming the option to write instead."""
        for arg in args:
            flag = arg.split("=", 1)[0]
            hint = self.spelling_hints.get(flag)  # first: a section's own flag (`--model`) may be a hint's
            underscored = "--" + flag[2:].replace("-", "_")
            if hint is None and flag.startswith("--") and not self._is_option(flag) and self._is_option(underscored):
                hint = underscored
            if hint is not None:
                self.fail(f"{flag} is spelt {hint} (an option is spelt as its config key)")

    def _help_names_as_class_paths(self, args: list[str]) -> list[str]:
        """`--methods.help pcd` -> `--methods.help evaluation.methods.pcd.PCD` (see `help_names`)."""
        out = list(args)
        for option, class_path in self.help_names.items():
            flag = f"--{option}.help"
            for index, arg in enumerate(out):
                if arg == flag and index + 1 < len(out):
                    out[index + 1] = class_path(out[index + 1]) or out[index + 1]
                elif arg.startswith(flag + "="):
                    out[index] = f"{flag}={class_path(arg[len(flag) + 1 :]) or arg[len(flag) + 1 :]}"
        return out


def take_flag(args: Sequence[str], flag: str) -> tuple[list[str], list[str]]:
    """(the values of every `FLAG VALUE` / `FLAG=VALUE` in `args`, in order; the other arguments, in order).

    A FLAG without its value is a ValueError naming it.
    """
    values, rest, index = [], [], 0
    while index < len(args):
        arg = args[index]
        if arg == flag:
            if index + 1 == len(args):
                raise ValueError(f"argument {flag}: expected one argument")
            values.append(args[index + 1])
            index += 2
            continue
        if arg.startswith(flag + "="):
            values.append(arg[len(flag) + 1 :])
        else:
            rest.append(arg)
        index += 1
    return values, rest


#: What a config file may hold: its bytes, and its values once YAML's aliases (`*name`) are expanded, as the
#: parser expands them (a few nested aliases can stand for billions of values).
MAX_CONFIG_BYTES = 10 * 2**20
MAX_CONFIG_VALUES = 100_000


def expanded_size(value: Any, limit: int = MAX_CONFIG_VALUES) -> int:
    """How many values `value` holds with every alias expanded, counting stopped just past `limit`."""
    count, stack = 0, [value]
    while stack and count <= limit:
        item = stack.pop()
        count += 1
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return count


def config_size_problem(path: str, data: Any) -> str:
    """One line when a loaded config file expands past `MAX_CONFIG_VALUES` values, else ""."""
    if expanded_size(data) > MAX_CONFIG_VALUES:
        return (
            f"{path} expands to more than {MAX_CONFIG_VALUES:,} values (YAML aliases repeated inside each other?); "
            "write the values out, without nested aliases"
        )
    return ""


def binary_config_message(path: str, err: UnicodeDecodeError) -> str:
    """One line for a --config file that is not text at all (an image, an archive, a checkpoint)."""
    return (
        f"{path} is not a YAML config file: it is binary, not UTF-8 text (byte {err.object[err.start]:#04x} at "
        f"offset {err.start}); pass --config the YAML file of the options"
    )


def _config_file_ok(path: str) -> tuple[bool, str]:
    """(use it, why not): a missing, unreadable or non-mapping file is an error; an empty one sets nothing."""
    try:
        return _config_file_checked(path)
    except PermissionError:
        return False, permission_message(path)


def read_config_yaml(path: str) -> Any:
    """The YAML data of an existing `--config` file; a file over `MAX_CONFIG_BYTES` or binary is a ValueError
    naming it (refused before YAML reads it), invalid YAML a `yaml.YAMLError`, each caller words that one."""
    if Path(path).stat().st_size > MAX_CONFIG_BYTES:
        raise ValueError(
            f"{path} is over {MAX_CONFIG_BYTES // 2**20} MB: not a config file; pass the YAML of the options"
        )
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(binary_config_message(path, err)) from None
    return yaml.safe_load(text)


def _config_file_checked(path: str) -> tuple[bool, str]:
    if not Path(path).is_file():
        return False, f"no config file at {path}; pass --config an existing YAML file"
    try:
        data = read_config_yaml(path)
    except ValueError as err:
        return False, str(err)
    except yaml.YAMLError as err:
        return False, f"{path} is not valid YAML: {' '.join(str(err).split())}"
    if data is None:
        return False, ""
    if not isinstance(data, dict):
        return False, f"{path}: the top level must be a mapping of keys to values, got {type(data).__name__}"
    problem = config_size_problem(path, data)
    return not problem, problem


def dump_config(config: Mapping[str, Any]) -> str:
    """A resolved configuration as YAML, keys in the order given (the order of `--print_config` and config.yaml)."""
    return yaml.safe_dump(_plain(config), sort_keys=False, allow_unicode=True, width=120)


def parse_script(
    parser: ConfigParser,
    argv: Sequence[str] | None,
    check: Callable[[argparse.Namespace], None] | None = None,
) -> argparse.Namespace:
    """A script's options, taken as every command takes them: `--config`, one spelling per option, `--print_config`.

    `check` holds the script's domain checks (its ValueError is the one-line error, exit code 2) and may add
    values it derives; `--print_config` then prints `script_config` and exits 0. Without a required option,
    `--print_config` prints a template (that option null) and skips `check`, which needs every option. The options come back as a
    plain `argparse.Namespace`, as the scripts had them (an option may be called `keys` without meeting
    jsonargparse's `Namespace.keys`); the `--config` files are merged into them, so there is no `config` key.
    """
    parsed, show = parser.parse(argv)
    parsed.print_config = show
    return script_options(parser, parsed, check)


def script_options(
    parser: ConfigParser, parsed: Namespace, check: Callable[[argparse.Namespace], None] | None = None
) -> argparse.Namespace:
    """`parse_script` after the parse: for a `dispatch` command in `resolves_config` (its `print_config` set), so a
    command of a package takes its options as a script does (checked by `check`, `--print_config` printed)."""
    show = parsed.print_config
    skip = ("config", "print_config")
    options = argparse.Namespace(**{key: value for key, value in parsed.as_dict().items() if key not in skip})
    template = show and any(
        action.required and getattr(options, action.dest, None) is None for action in parser._actions
    )
    if check is not None and not template:  # a template (`--print_config` without a required option) is not checked
        try:
            check(options)
        except ValueError as err:
            if not show:
                parser.fail(str(err))
            # --print_config shows the options even where their files are not here (a fresh clone, another machine)
            print(
                f"{parser.prog}: note: as printed, this would be refused: {one_line_error(str(err))}", file=sys.stderr
            )
    if show:
        print(dump_config(script_config(parser, options)), end="")
        raise SystemExit(0)
    return options


def script_config(parser: ConfigParser, options: argparse.Namespace) -> dict[str, Any]:
    """The options as a config file, in the order declared: what `--print_config` prints and a run stores.

    Values a check derived and hidden options (`help=argparse.SUPPRESS`, e.g. a benchmark's flag for its own
    child process) are left out, so `--config` of the text sets exactly the declared options.
    """
    return {
        action.dest: getattr(options, action.dest)
        for action in parser._actions
        if action.dest != "config" and action.help != argparse.SUPPRESS and hasattr(options, action.dest)
    }


def printable_options(options: Namespace) -> dict[str, Any]:
    """A command's parsed options as the config file that sets them: without `config` and `print_config`."""
    return {key: value for key, value in options.as_dict().items() if key not in ("config", "print_config")}


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    for kind in (int, float, str):  # jsonargparse's restricted types (PositiveInt, ...) and paths as plain values
        if isinstance(value, kind):
            return kind(value)
    if isinstance(value, Path):
        return str(value)
    return value


def class_entry(obj: Any, fields: Callable[[Any], Mapping[str, Any]]) -> dict[str, Any]:
    """`{class_path, init_args}` of a configured object, as jsonargparse and LightningCLI write it."""
    cls = type(obj)
    return {"class_path": f"{cls.__module__}.{cls.__qualname__}", "init_args": dict(fields(obj))}


def add_dataclass_options(parser: ConfigParser, config_class: type) -> None:
    """A command's options are the fields of the dataclass `config_class`: one option a field, typed by it, its
    docstring the help, each also a key of a `--config` file. The command's function builds the dataclass from
    the parsed options (`dataclass_config`), whose `__post_init__` judges the values."""
    # a field's docstring is its option's help; read only here, since it makes every later parser slower
    set_parsing_settings(docstring_parse_attribute_docstrings=True)
    try:
        parser.add_class_arguments(config_class, as_group=False, fail_untyped=True)
    finally:
        set_parsing_settings(docstring_parse_attribute_docstrings=False)
    flags = {item.name for item in dataclasses.fields(config_class) if item.type in (bool, "bool")}
    for action in parser._actions:
        if action.dest in flags:  # a bool option alone is true (`--quick`), as a flag; `--quick false` too
            action.nargs, action.const = "?", True
    parser.config_class = config_class


def dataclass_config(options: Namespace, config_class: type) -> Any:
    """The dataclass `config_class` from a command's parsed options: a value it refuses raises its ValueError,
    which `dispatch` prints as one line with exit code 2."""
    return config_class(**{item.name: options[item.name] for item in dataclasses.fields(config_class) if item.init})


def typed_options(parser: ConfigParser, argv: Sequence[str] | None) -> Any:
    """A script's options as its dataclass (`add_dataclass_options`): `--print_config` prints them as given and exits
    0, a value the dataclass refuses is one line on stderr and exit code 2 (`ConfigParser.fail`)."""
    options, show = parser.parse(argv)
    if show:
        print(dump_config(printable_options(options)), end="")
        raise SystemExit(0)
    try:
        return dataclass_config(options, parser.config_class)
    except ValueError as err:
        parser.fail(str(err))


def config_values(config: Any) -> dict[str, Any]:
    """A command's dataclass as the config file that sets it: its fields in order, not what `__post_init__` derived
    (what a run stores as config.yaml, so `--config` of it replays the run)."""
    return {item.name: getattr(config, item.name) for item in dataclasses.fields(config) if item.init}


def deferred(module: str, name: str) -> Callable[..., Any]:
    """`module.name`, imported when first called: a command table names its options and action without importing
    them, so `PROG --help` and the other commands load none of that command's imports (torch and the like)."""

    def call(*args: Any, **kwargs: Any) -> Any:
        return getattr(importlib.import_module(module), name)(*args, **kwargs)

    call.__qualname__ = call.__name__ = f"{module}.{name}"
    return call


def dispatch(
    prog: str,
    description: str,
    commands: Mapping[str, tuple[str, Callable[[ConfigParser], None], Callable[[Namespace, ConfigParser], int]]],
    argv: Sequence[str] | None,
    errors: tuple[type[Exception], ...] = (ValueError, OSError),
    more_commands: Mapping[str, str] | None = None,
    resolves_config: Collection[str] = (),
) -> int:
    """`PROG COMMAND [options]`: each command is a `ConfigParser` (its options, `--config`, one-line errors).

    `commands` maps a name to (help, add_options(parser), action(options, parser) -> exit code). A user mistake
    raised by the action (one of `errors`) is one line on stderr and exit code 2. `more_commands` (name -> help)
    are listed in the help only: the caller runs them itself (LightningCLI's fit / validate).

    `--print_config` prints the parsed options as YAML and exits 0 without running the action, required options
    left out printed as null; a command in `resolves_config` runs its action with `options.print_config` True
    instead, to print what it resolves them to (tasks and methods as classes, a search's defaults).
    """
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        names = [*commands, *(more_commands or {})]
        lines = [f"usage: {prog} {{{','.join(names)}}} [options]", "", description, "", "commands:"]
        lines += [f"  {name:10s} {help_text}" for name, (help_text, _, _) in commands.items()]
        lines += [f"  {name:10s} {help_text}" for name, help_text in (more_commands or {}).items()]
        lines += ["", f"`{prog} COMMAND --help` lists a command's options."]
        print("\n".join(lines))
        return 0
    name = args[0]
    if name not in commands:
        print(f"{prog}: error: unknown command {name!r}; choose from {list(commands)}", file=sys.stderr)
        return EXIT_USAGE
    help_text, add_options, action = commands[name]
    parser = ConfigParser.for_command(f"{prog} {name}", help_text)
    add_options(parser)
    try:
        options, show = parser.parse(args[1:])
    except SystemExit as stop:  # the one-line error is printed; --help exits 0 as argparse does
        if stop.code == EXIT_USAGE:
            return EXIT_USAGE
        raise
    options.print_config = show
    if show and name not in resolves_config:
        print(dump_config(printable_options(options)), end="")
        return 0
    return report_user_errors(f"{prog} {name}", lambda: action(options, parser), errors)
