"""DESIGN's dependency direction, read from the source (no module is imported or executed).

The shared floor (`repo_common`) imports no other project package; nothing below the top floor
(`workflows`) imports it. The core (`repo_train.modeling`, `.data`, `.training`) imports nothing from
`workflows`, `search` or `evaluation`; nothing in `evaluation` or `repo_train` imports `search`. Every import statement counts: relative ones, those inside functions, and
`importlib.import_module` / `__import__` calls with a literal name.

No import cycle among the project's modules, counting every import: at module level, inside
functions, under `if TYPE_CHECKING:`, `import_module` and `deferred` with a literal name; every import inside a function of a project module or a third-party package says
why in a comment on its line; the project imports inside functions are capped (docs/architecture.md,
rule 2).
"""

from __future__ import annotations

import ast
import io
import re
import sys
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

CORE = ("repo_train/modeling", "repo_train/data", "repo_train/training")
CORE_MAY_NOT_IMPORT = ("workflows", "search", "evaluation")
NOT_IMPORTING_SEARCH = ("evaluation", "repo_train")
SHARED = ("repo_common",)
PROJECT_PACKAGES = ("repo_train", "evaluation", "search", "workflows")
BELOW_WORKFLOWS = ("repo_common", "repo_train", "evaluation", "search")
ALL_PROJECT = ("repo_common", *PROJECT_PACKAGES)
#: Project imports inside functions, each with its reason (2026-11-26: 63; 2026-11-28: 50, then 5 once every
#: command's work moved to modules that its command table reaches through `deferred` after parsing and that
#: import at the top). A new one needs a reason, or goes to the top of its module (docs/architecture.md, rule 2).
IN_FUNCTION_PROJECT_IMPORTS_CAP = 5


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
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[tuple[int, str]] = list(dynamic_imports(tree))
    for node in ast.walk(tree):
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
    return found


def dynamic_imports(tree: ast.Module) -> Iterator[tuple[int, str]]:
    """(line, name) of every `import_module("a.b")` / `__import__("a.b")` call with a literal name, and of every
    `deferred("a.b", "f")` (`repo_common.config_cli`: a command table's module, imported when the command runs)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if called in ("import_module", "__import__", "deferred") and isinstance(node.args[0].value, str):
                yield node.lineno, node.args[0].value


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
        (
            "from repo_common.config_cli import deferred\nrun = deferred('evaluation.runner', 'run')\n",
            "evaluation.runner",
        ),
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


def project_modules(root: Path = ROOT, packages: tuple[str, ...] = ALL_PROJECT) -> dict[str, Path]:
    """Every module of `packages` under `root`, by its dotted name."""
    return {module_name(path, root): path for package in packages for path in sorted((root / package).rglob("*.py"))}


def _type_checking_only(node: ast.stmt) -> bool:
    test = getattr(node, "test", None) if isinstance(node, ast.If) else None
    return isinstance(test, (ast.Name, ast.Attribute)) and getattr(test, "id", getattr(test, "attr", "")) == (
        "TYPE_CHECKING"
    )


def placed_imports(tree: ast.Module, type_checking: bool = False) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """(import statement, inside a function?) for every import that can run: those at module level (also in
    class bodies, `if`/`try`/`with` blocks) run when the module is imported; an `if TYPE_CHECKING:` body never
    (its imports come too with `type_checking`: a type checker follows them)."""

    def visit(node: ast.AST, in_function: bool) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
        for child in ast.iter_child_nodes(node):
            if _type_checking_only(child) and not type_checking:
                for other in child.orelse:
                    yield from visit_one(other, in_function)
            else:
                yield from visit_one(child, in_function)

    def visit_one(node: ast.AST, in_function: bool) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, in_function
        yield from visit(node, in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    yield from visit(tree, False)


def import_targets(node: ast.Import | ast.ImportFrom, importer: str, is_package: bool, modules) -> list[str]:
    """The modules one statement names: `import a.b` -> a.b; `from a import b` -> a.b when that is a module,
    else a (b is a name in a); relative imports resolved against `importer`."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    source = node.module or ""
    if node.level:
        parts = (importer if is_package else importer.rpartition(".")[0]).split(".")
        base = ".".join(parts[: len(parts) - node.level + 1])
        source = f"{base}.{node.module}" if node.module else base
    return [f"{source}.{a.name}" if f"{source}.{a.name}" in modules else source for a in node.names]


def module_graph(root: Path = ROOT, packages: tuple[str, ...] = ALL_PROJECT) -> dict[str, set[str]]:
    """module -> the project modules it imports: every import, at module level, inside a function, under `if
    TYPE_CHECKING:`, or `import_module` / `deferred` with a literal name (a loop through a late import still ties
    the two modules together: neither can move or be read without the other).

    Importing `a.b.c` also runs the `__init__` of `a` and `a.b` first, unless the importer lies inside that
    package (its `__init__` then ran before the importer): so `a.x` importing `a.b.c` is an edge to `a.b` too.
    """
    modules = project_modules(root, packages)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        targets = [target for _, target in dynamic_imports(tree)]
        for node, _ in placed_imports(tree, type_checking=True):
            targets += import_targets(node, name, path.name == "__init__.py", modules)
        for target in targets:
            parts = target.split(".")
            for depth in range(1, len(parts) + 1):
                step = ".".join(parts[:depth])
                holds_importer = name.startswith(step + ".")
                if step in modules and step != name and (depth == len(parts) or not holds_importer):
                    graph[name].add(step)
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import each other around a loop (strongly connected, more than one)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        while work:
            node, targets = work[-1]
            target = next(targets, None)
            if target is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = stack[stack.index(node) :]
                    del stack[stack.index(node) :]
                    if len(group) > 1:
                        cycles.append(sorted(group))
            elif target not in index:
                index[target] = low[target] = len(index)
                stack.append(target)
                work.append((target, iter(sorted(graph[target]))))
            elif target in stack:
                low[node] = min(low[node], index[target])
    return sorted(cycles)


def _cycle_report(graph: dict[str, set[str]], group: list[str]) -> str:
    inside = set(group)
    return "; ".join(f"{name} -> {', '.join(sorted(graph[name] & inside))}" for name in group)


#: A comment that is not a reason: a bare lint pragma, or a cycle (step 3 removed them: fix the layout instead).
NOT_A_REASON = re.compile(r"^(noqa\b[:\w, ]*|type: *ignore\S*|cycle\b.*|.*import cycle.*)?$", re.IGNORECASE)


def in_function_imports(root: Path = ROOT, packages: tuple[str, ...] = ALL_PROJECT, skip: tuple[str, ...] = ()):
    """(`file:line`, statement text, project import?, reason or None) of every import inside a function of a
    project module or a third-party package (the standard library needs no reason)."""
    modules = project_modules(root, packages)
    found = []
    for name, path in modules.items():
        where = path.relative_to(root).as_posix()
        if where in skip:
            continue
        text = path.read_text()
        comments: dict[int, str] = {}
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type == tokenize.COMMENT:
                comments[token.start[0]] = token.string.lstrip("#").strip()
        lines = text.splitlines()
        for node, in_function in placed_imports(ast.parse(text, filename=str(path))):
            targets = import_targets(node, name, path.name == "__init__.py", modules)
            tops = {target.split(".")[0] for target in targets}
            if not in_function or tops <= set(sys.stdlib_module_names) | {"__future__"}:
                continue
            said = [comments[line] for line in range(node.lineno, node.end_lineno + 1) if line in comments]
            reasons = [part for c in said for part in map(str.strip, c.split("#")) if not NOT_A_REASON.match(part)]
            found.append(
                (f"{where}:{node.lineno}", lines[node.lineno - 1].strip(), bool(tops & set(packages)), reasons)
            )
    return found


def test_no_import_cycle():
    graph = module_graph()
    assert len(graph) > 100, f"only {len(graph)} project modules found: did the layout move?"
    cycles = import_cycles(graph)
    assert not cycles, (
        "modules that import each other, at module level, inside a function or for type checking (move the shared "
        "piece below both, docs/architecture.md):\n" + "\n".join(_cycle_report(graph, group) for group in cycles)
    )


def test_every_import_inside_a_function_says_why():
    found = in_function_imports()
    assert len(found) > 20, f"only {len(found)} imports inside functions found: is the scan broken?"
    silent = [f"{where}  {statement}" for where, statement, _, reasons in found if not reasons]
    assert not silent, (
        "an import inside a function needs a reason in a comment on its line ('# heavy: keeps --help fast', "
        "'# optional extra: real', or what it avoids; a cycle is not a reason: move the shared piece below both), "
        "or belongs at the top of its module (docs/architecture.md, rule 2):\n" + "\n".join(silent)
    )


def over_cap(found, cap: int) -> str | None:
    """The failure message when `found` (from `in_function_imports`) holds more project imports than `cap`."""
    project = [f"{where}  {statement}" for where, statement, is_project, _ in found if is_project]
    if len(project) <= cap:
        return None
    return (
        f"{len(project)} imports of project modules inside functions, over the cap of {cap}: move the new one to "
        "the top of its module, or, if it must stay inside (start-up time, an optional extra), give it a reason in "
        "a comment and raise IN_FUNCTION_PROJECT_IMPORTS_CAP (tests/test_layering.py, docs/architecture.md):\n"
        + "\n".join(project)
    )


def test_project_imports_inside_functions_are_capped():
    problem = over_cap(in_function_imports(), IN_FUNCTION_PROJECT_IMPORTS_CAP)
    assert problem is None, problem


def _fake_package(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


#: The shapes step 3 removed, and the look-alikes that are not cycles.
CYCLE_CASES = {
    "package re-exports its sources, which import the package": (
        {
            "pkg/__init__.py": "",
            "pkg/data/__init__.py": "def check(): ...\nfrom pkg.data.text import Text\n",
            "pkg/data/text.py": "from pkg.data import check\nclass Text: ...\n",
        },
        ["pkg.data", "pkg.data.text"],
    ),
    "a module imports a sibling package's module whose __init__ imports it back": (
        {
            "pkg/__init__.py": "",
            "pkg/decoding.py": "from pkg.methods.base import Method\n",
            "pkg/methods/__init__.py": "from pkg.methods import pcd\n",
            "pkg/methods/base.py": "class Method: ...\n",
            "pkg/methods/pcd.py": "from ..decoding import loop\n",
        },
        ["pkg.decoding", "pkg.methods", "pkg.methods.pcd"],
    ),
    "the same inside an if block at module level": (
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "import sys\nif sys.version_info >= (3,):\n    import pkg.b\n",
            "pkg/b.py": "class B:\n    from pkg import a\n",
        },
        ["pkg.a", "pkg.b"],
    ),
    "not a cycle: the contract in base.py, the package only re-exports": (
        {
            "pkg/__init__.py": "",
            "pkg/data/__init__.py": "from pkg.data.base import check\nfrom pkg.data.text import Text\n",
            "pkg/data/base.py": "def check(): ...\n",
            "pkg/data/text.py": "from pkg.data.base import check\nfrom pkg.data import base\nclass Text: ...\n",
        },
        None,
    ),
    "the import back is inside a function": (
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "import pkg.b\n",
            "pkg/b.py": "class B:\n    def make(self):\n        from pkg import a  # heavy\n",
        },
        ["pkg.a", "pkg.b"],
    ),
    "the import back is only for type checking": (
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.b import B\n",
            "pkg/b.py": "import pkg.a\n",
        },
        ["pkg.a", "pkg.b"],
    ),
    "the import back is an import_module with a literal name": (
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "import pkg.b\n",
            "pkg/b.py": "import importlib\ndef late():\n    return importlib.import_module('pkg.a')\n",
        },
        ["pkg.a", "pkg.b"],
    ),
    "a command's module, deferred, imports its table back": (
        {
            "pkg/__init__.py": "",
            "pkg/cli.py": "from repo_common.config_cli import deferred\nCOMMANDS = {'run': deferred('pkg.work', 'run')}\n",
            "pkg/work.py": "from pkg.cli import COMMANDS\n",
        },
        ["pkg.cli", "pkg.work"],
    ),
    "not a cycle: late and type-checking imports that point one way": (
        {
            "pkg/__init__.py": "",
            "pkg/base.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import os\n",
            "pkg/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.base import X\n",
            "pkg/b.py": "import pkg.base\ndef make():\n    from pkg import a  # heavy\n",
        },
        None,
    ),
}


@pytest.mark.parametrize("case", list(CYCLE_CASES))
def test_the_cycle_check_finds_package_level_cycles(tmp_path, case):
    files, expected = CYCLE_CASES[case]
    _fake_package(tmp_path, files)
    cycles = import_cycles(module_graph(tmp_path, ("pkg",)))
    assert cycles == ([expected] if expected else []), cycles


def test_the_reason_check_sees_silent_and_non_reasons(tmp_path):
    """Project and third-party imports inside functions need a reason; the standard library does not; a bare
    `noqa` or a cycle is not one; a comment on any line of a parenthesised import counts."""
    _fake_package(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/base.py": "X = 1\n",
            "pkg/mod.py": (
                "import torch\n"  # module level: no reason needed
                "def f():\n"
                "    import json\n"  # standard library
                "    import numpy as np\n"  # silent third-party
                "    from pkg import base\n"  # silent project import
                "    from pkg.base import X  # heavy: keeps --help fast\n"
                "    import yaml  # noqa: PLC0415\n"
                "    from . import base as b  # cycle: pkg.base imports this\n"
                "    from pkg.base import (  # optional extra: real\n"
                "        X as Y,\n"
                "    )\n"
                "    g = lambda: __import__('os')\n"
                "class C:\n"
                "    def m(self):\n"
                "        import matplotlib\n"
            ),
        },
    )
    found = in_function_imports(tmp_path, ("pkg",))
    silent = [(where, is_project) for where, _, is_project, reasons in found if not reasons]  # in source order
    assert silent == [
        ("pkg/mod.py:4", False),
        ("pkg/mod.py:5", True),
        ("pkg/mod.py:7", False),
        ("pkg/mod.py:8", True),
        ("pkg/mod.py:15", False),
    ], found
    assert [where for where, _, is_project, _ in found if is_project] == [
        "pkg/mod.py:5",
        "pkg/mod.py:6",
        "pkg/mod.py:8",
        "pkg/mod.py:9",
    ]
    assert in_function_imports(tmp_path, ("pkg",), skip=("pkg/mod.py",)) == []


def test_the_cap_counts_project_imports_inside_functions(tmp_path):
    _fake_package(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "import pkg.b\n\ndef f():\n    import torch  # heavy\n    from pkg import b  # lazy\n",
            "pkg/b.py": "def g():\n    from pkg.a import f  # lazy\n",
        },
    )
    found = in_function_imports(tmp_path, ("pkg",))
    assert over_cap(found, 2) is None
    problem = over_cap(found, 1)
    assert problem is not None and problem.startswith("2 imports of project modules inside functions, over the cap")
    assert "pkg/a.py:5  from pkg import b  # lazy" in problem and "pkg/b.py:2" in problem and "torch" not in problem
