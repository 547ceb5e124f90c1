"""DESIGN's dependency direction, read from the source (no module is imported or executed).

The shared floor (`repo_common`) imports no other project package; nothing below the top floor
(`workflows`) imports it. The core (`repo_train.modeling`, `.data`, `.training`) imports nothing from
`workflows`, `search` or `evaluation`; nothing in `evaluation` or `repo_train` imports `search`. Every import statement counts: relative ones, those inside functions, and
`importlib.import_module` / `__import__` calls with a literal name.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

CORE = ("repo_train/modeling", "repo_train/data", "repo_train/training")
CORE_MAY_NOT_IMPORT = ("workflows", "search", "evaluation")
NOT_IMPORTING_SEARCH = ("evaluation", "repo_train")
SHARED = ("repo_common",)
PROJECT_PACKAGES = ("repo_train", "evaluation", "search", "workflows")
BELOW_WORKFLOWS = ("repo_common", "repo_train", "evaluation", "search")


def module_name(path: Path, root: Path) -> str:
    """`repo_train/modeling/policy.py` -> `repo_train.modeling.policy`; a package's `__init__.py` -> the package."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_names(path: Path, root: Path) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in `path`; `from X import y` yields both X and X.y."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1])
                source = f"{base}.{node.module}" if node.module else base
            else:
                source = node.module or ""
            found.append((node.lineno, source))
            found += [(node.lineno, f"{source}.{alias.name}") for alias in node.names if alias.name != "*"]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if called in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                found.append((node.lineno, node.args[0].value))
    return found


def violations(folders: tuple[str, ...], forbidden: tuple[str, ...], root: Path = ROOT) -> tuple[list[str], int]:
    """("file:line (module) imports NAME", one per offending statement, under `folders`; modules scanned)."""
    problems, scanned = {}, 0
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            scanned += 1
            for line, name in imported_names(path, root):
                if any(name == prefix or name.startswith(prefix + ".") for prefix in forbidden):
                    where = f"{path.relative_to(root)}:{line} ({module_name(path, root)})"
                    problems[where] = min(problems.get(where, name), name, key=len)  # `from X import y`: name X
    return [f"{where} imports {name}" for where, name in sorted(problems.items())], scanned


def test_core_imports_no_scripts_search_or_evaluation():
    problems, scanned = violations(CORE, CORE_MAY_NOT_IMPORT)
    assert scanned > 10, f"only {scanned} core modules found under {CORE}: did the layout move?"
    assert not problems, "the model core must not import these (DESIGN.md):\n" + "\n".join(problems)


def test_nothing_in_evaluation_or_repo_train_imports_search():
    problems, scanned = violations(NOT_IMPORTING_SEARCH, ("search",))
    assert scanned > 30, f"only {scanned} modules found under {NOT_IMPORTING_SEARCH}"
    assert not problems, "nothing may import `search` (DESIGN.md):\n" + "\n".join(problems)


def test_nothing_below_the_workflows_imports_them():
    problems, scanned = violations(BELOW_WORKFLOWS, ("workflows",))
    assert scanned > 60, f"only {scanned} modules found under {BELOW_WORKFLOWS}"
    assert not problems, "workflows is the top floor (docs/architecture.md):\n" + "\n".join(problems)


def test_shared_infrastructure_imports_no_project_package():
    problems, scanned = violations(SHARED, PROJECT_PACKAGES)
    assert scanned >= 7, f"only {scanned} modules found under {SHARED}"
    assert not problems, "repo_common is floor 0 (docs/architecture.md):\n" + "\n".join(problems)


@pytest.mark.parametrize(
    ("source", "caught"),
    [
        ("from ..scripting import commands\n", "pkg.scripting.commands"),
        ("from .. import scripting\n", "pkg.scripting"),
        ("def late():\n    import evaluation.runner\n", "evaluation.runner"),
        ("from search import genome\n", "search.genome"),
        ("import importlib\nimportlib.import_module('evaluation.tasks')\n", "evaluation.tasks"),
    ],
)
def test_the_scan_sees_relative_late_and_dynamic_imports(tmp_path, source, caught):
    """A scanner that missed one of these forms would let the two tests above pass on a broken layout."""
    module = tmp_path / "pkg" / "modeling" / "policy.py"
    module.parent.mkdir(parents=True)
    module.write_text("import os\nfrom . import rope\n" + source)
    names = [name for _, name in imported_names(module, tmp_path)]
    assert "pkg.modeling.rope" in names and "os" in names and caught in names
    problems, scanned = violations(("pkg",), ("pkg.scripting", "search", "evaluation"), tmp_path)
    reported = [p.rpartition(" imports ")[2] for p in problems if p.startswith("pkg/modeling/policy.py:")]
    assert scanned == 1 and len(reported) == 1 and caught.startswith(reported[0]), problems
    assert not any("rope" in p or " os" in p for p in problems), problems
