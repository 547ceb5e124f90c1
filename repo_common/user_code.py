"""A user's own classes (tasks, calibrators, position policies, data sources), imported only when named.

A `class_path` in a config names code that runs when its module is imported. So a command imports a
module only if it belongs to the project's packages or the user named it with `--import MODULE` (on the
command line, or as `import: [...]` in a config file); any other `class_path` is refused before anything
is imported. A module named with `--import` registers its classes as it loads (`@register_method`,
`@register_task`, `@register_policy`), so it can also extend the short forms (`--methods NAME:k=v`).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml

#: Packages whose modules a class_path may name without `--import`.
PROJECT_PACKAGES = ("repo_common", "repo_train", "evaluation", "search", "workflows")
FLAG = "--import"
KEY = "import"


def add_import_argument(parser: Any) -> None:
    """`--import` on a jsonargparse parser (the project's ConfigParser or LightningCLI's): a list of modules,
    also `import: [...]` in a config file, so a run's saved config replays its imports."""
    parser.add_argument(
        FLAG,
        dest=KEY,
        type=list[str],
        default=[],
        help="your own module (a.b.c or file.py) to import first: its tasks, methods, policies or data sources "
        "can then be named (repeatable; docs/configuring.md)",
    )


def split_names(values: Iterable[str]) -> list[str]:
    """`--import a,b --import c` (or a YAML list) as ["a", "b", "c"]."""
    names: list[str] = []
    for value in values:
        names += [name.strip() for name in str(value).split(",") if name.strip()]
    return names


def import_user_module(name: str) -> str:
    """Import a module named on the command line (dotted, importable from the current directory, or a path to a
    .py file) and return its module name; a mistake is a ValueError of one line."""
    if name.endswith(".py"):
        path = Path(name)
        if not path.is_file():
            raise ValueError(f"--import {name}: no such file; give a .py file or a dotted module name")
        module_name = path.stem
        spec = importlib.util.spec_from_file_location(module_name, path)
        if module_name in sys.modules and getattr(sys.modules[module_name], "__file__", None) == str(path.resolve()):
            return module_name
        _refuse_taken_name(name, module_name)
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        try:
            spec.loader.exec_module(module)
        except SystemExit as err:
            del sys.modules[module_name]
            raise ValueError(_exited(name, err)) from None
        except Exception as err:  # noqa: BLE001 (the user's module may raise anything: named in one line)
            del sys.modules[module_name]
            raise ValueError(f"--import {name}: importing it failed: {type(err).__name__}: {err}") from None
        return module_name
    top = name.partition(".")[0]
    if top in sys.stdlib_module_names:
        raise ValueError(
            f"--import {name}: {top!r} is a module of Python's standard library, so this would import that, not "
            "yours; rename your module"
        )
    if str(Path.cwd()) not in sys.path and "" not in sys.path:  # as `python -m` does for the current directory
        sys.path.insert(0, str(Path.cwd()))
    try:
        importlib.import_module(name)
    except SystemExit as err:
        raise ValueError(_exited(name, err)) from None
    except ModuleNotFoundError as err:
        if err.name and name.startswith(err.name):
            raise ValueError(
                f"--import {name}: no module named {err.name!r}; give a module importable from the current directory "
                "(a.b.c) or a path to a .py file"
            ) from None
        raise ValueError(f"--import {name}: importing it failed: {err}") from None
    except Exception as err:  # noqa: BLE001 (the user's module may raise anything: named in one line)
        raise ValueError(f"--import {name}: importing it failed: {type(err).__name__}: {err}") from None
    return name


def _refuse_taken_name(given: str, module_name: str) -> None:
    """A .py file whose name is the standard library's or an already loaded module's would replace that module
    for the whole process (every `import json` after it would get the user's file): refused in one line."""
    taken = module_name in sys.stdlib_module_names or module_name in PROJECT_PACKAGES or module_name in sys.modules
    if taken:
        raise ValueError(
            f"--import {given}: the module name {module_name!r} is already taken (the standard library, this project "
            "or a loaded package), and importing the file under it would replace that module; rename the file"
        )


def _exited(given: str, err: SystemExit) -> str:
    """The one line for a user's module that called sys.exit while being imported (the command would otherwise
    end there, with that exit code, having done nothing)."""
    return (
        f"--import {given}: the module called sys.exit({err.code!r}) while being imported; a module given to "
        "--import should only define tasks, methods, policies or data sources (move the script part under "
        "`if __name__ == '__main__':`)"
    )


def import_user_modules(names: Sequence[str]) -> list[str]:
    """Import each named module (see `import_user_module`); the module names, in order."""
    return [import_user_module(name) for name in split_names(names)]


def module_name_of(name: str) -> str:
    """The module a `--import` value stands for: a dotted name as it is, a .py file by its stem."""
    return Path(name).stem if name.endswith(".py") else name


def _module_of(class_path: str) -> str:
    return class_path.rpartition(".")[0]


def allowed(class_path: str, user_modules: Iterable[str] = ()) -> bool:
    """Whether `class_path` names a project module or one the user imported (or a module inside one)."""
    module = _module_of(class_path)
    roots = (*PROJECT_PACKAGES, *user_modules)
    return any(module == root or module.startswith(root + ".") for root in roots)


def check_class_path(class_path: str, user_modules: Iterable[str] = (), where: str = "class_path") -> None:
    """Refuse, in one line and before any import, a class_path outside the project and the user's modules."""
    if not isinstance(class_path, str) or "." not in class_path.strip("."):
        return  # a short class name: resolved among the loaded subclasses, imports nothing
    if not allowed(class_path, user_modules):
        module = _module_of(class_path)
        raise ValueError(
            f"{where} {class_path!r} names module {module!r}, which is not one of the project's packages; "
            f"pass --import {module} to run its code (a module is imported only when named)"
        )


def resolve_class(class_path: str, base: type, user_modules: Iterable[str] = (), where: str = "class_path") -> type:
    """The class a (checked) class_path names, which must be a subclass of `base`; errors in one line."""
    check_class_path(class_path, user_modules, where)
    module, _, name = class_path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError):
        raise ValueError(f"{where} {class_path!r} cannot be imported; give module.ClassName") from None
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise ValueError(f"{where} {class_path!r} is not a {base.__name__} subclass")  # noqa: TRY004 (user error)
    return cls


def subclasses(cls: type) -> list[type]:
    """Every loaded subclass of `cls`, depth first."""
    return [sub for direct in cls.__subclasses__() for sub in (direct, *subclasses(direct))]


def loaded_subclass(base: type, class_path: str) -> type | None:
    """The loaded subclass of `base` a config's class_path names, or None; nothing is imported.

    A class is named by its class name, its defining module's path, or a path a loaded module re-exports it under
    (`repo_train.data.TextData`, `repo_train.modeling.RepoPosition`).
    """
    for cls in subclasses(base):
        if class_path in (cls.__name__, f"{cls.__module__}.{cls.__qualname__}"):
            return cls
    module_name, _, name = class_path.rpartition(".")
    found = getattr(sys.modules.get(module_name), name, None)
    return found if isinstance(found, type) and issubclass(found, base) and found is not base else None


def class_paths_in(value: Any) -> Iterator[str]:
    """Every `class_path` string inside a parsed YAML/JSON value."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "class_path" and isinstance(item, str):
                yield item
            else:
                yield from class_paths_in(item)
    elif isinstance(value, list):
        for item in value:
            yield from class_paths_in(item)


def class_paths_in_args(args: Sequence[str]) -> Iterator[str]:
    """Every class_path on a command line: `--x.class_path NAME`, `--x.class_path=NAME`, or inside a YAML/JSON
    value (`--tasks '[{class_path: ...}]'`)."""
    for index, arg in enumerate(args):
        option, eq, value = arg.partition("=")
        if option.startswith("--") and option.endswith("class_path"):
            if eq:
                yield value
            elif index + 1 < len(args):
                yield args[index + 1]
            continue
        text = value if (eq and option.startswith("--")) else arg
        if text[:1] in ("{", "["):
            try:
                yield from class_paths_in(yaml.safe_load(text))
            except yaml.YAMLError:
                continue
