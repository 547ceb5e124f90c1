"""No shipped config or default names a path outside the clone (a user has no `../shared`, nor our home folders).

The configs under configs/ are read as YAML; the commands' defaults as their parsers hold them, with the
module-level values of every project module those parsers load (where a default such as the study's data file
is filled in after the parse) and the help each command prints (an example a user would copy). A path leaves
the clone when it starts with `..` or `~`, or is absolute and not under the clone.
"""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("evaluation", "search", "repo_train", "repo_common", "workflows")
#: The packages whose `cli.COMMANDS` declare dispatch commands (`repo_common.config_cli.dispatch`).
CLI_PACKAGES = ("evaluation", "search", "repo_train", "workflows")
#: `../x` or `~/x` inside a help text (not `...`, not part of a word).
_RELATIVE_OUT = re.compile(r"(?<![\w./])(\.\./|~/)\S*")


def leaves_the_clone(value: Any) -> bool:
    """Whether `value` (a str or Path) is a path outside the clone."""
    if isinstance(value, Path):
        text = str(value)
    elif isinstance(value, str):
        text = value
        if not (text.startswith(("..", "~")) or re.match(r"^/[\w.-]+/", text)):
            return False  # a word, a name, a relative path inside the working directory
    else:
        return False
    if text.startswith(("..", "~")):
        return True
    path = Path(text)
    return path.is_absolute() and not path.resolve().is_relative_to(ROOT)


def leaves(value: Any, key: str = "") -> Iterator[tuple[str, Any]]:
    """(key, value) of each str or Path in `value` (nested dicts, lists, tuples) that leaves the clone."""
    if isinstance(value, dict):
        for name, item in value.items():
            yield from leaves(item, f"{key}.{name}" if key else str(name))
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from leaves(item, f"{key}[{index}]")
    elif leaves_the_clone(value):
        yield key, value


def command_findings() -> list[str]:
    """Every command's defaults and help, then the module values of the project modules they loaded."""
    from repo_common.config_cli import ConfigParser

    found = []
    for package in CLI_PACKAGES:
        for name, (help_text, add_options, _action) in importlib.import_module(f"{package}.cli").COMMANDS.items():
            parser = ConfigParser.for_command(f"python -m {package} {name}", help_text)
            add_options(parser)
            command = f"python -m {package} {name}"
            found += [f"{command}: default {key} = {value}" for key, value in leaves(parser.get_defaults().as_dict())]
            found += [
                f"{command}: its help shows {match.group(0)}" for match in _RELATIVE_OUT.finditer(parser.format_help())
            ]
    for module in [name for name in sys.modules if name.split(".")[0] in PACKAGES]:
        for name, value in list(vars(sys.modules[module]).items()):
            found += [f"{module}.{key} = {item}" for key, item in leaves(value, name)]
    return found


def test_no_config_names_a_path_outside_the_clone():
    import yaml

    configs = sorted((ROOT / "configs").rglob("*.yaml"))
    assert configs
    found = [f"{path.relative_to(ROOT)}: {key} = {value}" for path in configs
             for key, value in leaves(yaml.safe_load(path.read_text(encoding="utf-8")))]  # fmt: skip
    assert found == [], "configs name paths outside the clone (users have only the clone):\n" + "\n".join(found)


def test_no_command_default_names_a_path_outside_the_clone():
    """In a fresh interpreter: only the modules the commands' parsers load, whatever the other tests imported."""
    result = subprocess.run(
        [sys.executable, __file__], capture_output=True, text=True, cwd=ROOT, timeout=300, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert found == [], "defaults name paths outside the clone (users have only the clone):\n" + "\n".join(found)


def test_the_check_finds_such_paths():
    assert (
        leaves_the_clone("../shared/data")
        and leaves_the_clone("~/data")
        and leaves_the_clone(ROOT.parent / f"{ROOT.name}-sibling")
    )
    assert leaves_the_clone("/data/lost-in-the-middle/qa_data")
    assert not leaves_the_clone("models/smollm2") and not leaves_the_clone(ROOT / "evaluation" / "data")
    assert not leaves_the_clone("/") and not leaves_the_clone("a/b") and not leaves_the_clone(3)
    assert [match.group(0) for match in _RELATIVE_OUT.finditer("--data ../shared/x.gz, a.../b")] == ["../shared/x.gz,"]


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    print(json.dumps(command_findings()))
