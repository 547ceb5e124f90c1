"""The search config: typed dataclasses, loaded from YAML with every key and type checked.

A config file has six sections, each optional (missing keys keep their
defaults, which are the paper's):

    model:    {path, seed, num_layers, dtype, attn_implementation, device}
    task:     {name, num_items, num_examples, seed, data_dir, max_new_tokens, batch_size, max_length, truncate,
               key_chars, template, distinct_keys}
    weights:  {begin, middle, end}                    # λ of Eq. 7 (search.fitness.SubsetWeights)
    space:    {curve, num_points, y_min_tenths, y_max_tenths}
    ga:       {population, parents, generations, ...} # search.ga.GAConfig (Table 9)
    held_out: {num_examples, seed, offset}

`load_config(path)` reads one; an unknown key or a value of the wrong type is a
`ConfigError` naming the file, the dotted key and what is valid.
`SearchConfig.tiny()` is the seconds-on-a-CPU preset (configs/search/tiny.yaml).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from search.fitness import SubsetWeights
from search.ga import GAConfig
from search.genome import SearchSpace

#: Tasks a search can score: both place one relevant item among k at a chosen index.
SEARCH_TASKS = ("mdqa", "kv")


class ConfigError(ValueError):
    """A search config that cannot be used; the message names the file, the key and the fix."""


@dataclass(frozen=True)
class ModelConfig:
    """Which model the search scales."""

    path: str | None = None
    """Local HF model directory; None = the built-in tiny random OLMo-2 (smoke tests only)."""
    seed: int = 0
    """Seed of the tiny default's random weights (ignored with a path)."""
    num_layers: int | None = None
    """Decoder layers the config was written for; a model with another count is refused (None = any)."""
    dtype: str = "float32"
    """float32, bfloat16 or float16."""
    attn_implementation: str = "sdpa"
    """sdpa, eager or flash_attention_2."""
    device: str = "auto"
    """auto (cuda:LOCAL_RANK when CUDA is available, else cpu), cpu, or cuda."""


@dataclass(frozen=True)
class TaskConfig:
    """The search set: one task, the relevant item at the beginning, middle or end."""

    name: str = "mdqa"
    """mdqa (nq-open-oracle file) or kv (release file, or generated UUID pairs)."""
    num_items: int = 20
    """k: documents per MDQA prompt, or key-value pairs per KV prompt."""
    num_examples: int = 200
    """Source examples; each appears once per subset (gold at 0, ⌊(k−1)/2⌋, k−1)."""
    seed: int = 0
    """Seed of the task build (MDQA distractors, generated KV pairs)."""
    data_dir: str | None = None
    """Folder with nq-open-oracle*.jsonl(.gz) / kv-retrieval-<k>_keys.jsonl(.gz); None = fixture / generate."""
    max_new_tokens: int = 100
    """Greedy tokens per answer (the harness default; answers stop at the first newline)."""
    batch_size: int = 8
    """Prompts per forward."""
    max_length: int | None = None
    """Prompt + new tokens budget; None = the model's max_position_embeddings."""
    truncate: str | None = None
    """None (a too-long prompt is an error), 'left' or 'middle'."""
    key_chars: int | None = None
    """kv generated examples only: keys/values of this many hex digits (small models); None = full UUIDs."""
    template: str = "json"
    """kv prompt: "json" (the release's) or "pairs" (tiny models; needs key_chars; evaluation/tasks/kv_retrieval.py)."""
    distinct_keys: int | None = None
    """kv "pairs" only: the num_items pairs repeat this many keys (gold once): long contexts; None = all distinct."""


@dataclass(frozen=True)
class SpaceConfig:
    """The search space of `search.genome.SearchSpace` minus the layer count (that comes from the model)."""

    curve: str = "bezier"
    """bezier, linear, step, or none (brute force: one free scale per layer)."""
    num_points: int = 4
    """Control points (degree + 1); the paper uses a cubic Bézier curve, 4 points."""
    y_min_tenths: int = 10
    """Smallest scale in tenths (10 = 1.0)."""
    y_max_tenths: int = 20
    """Largest scale in tenths (20 = 2.0)."""

    def build(self, num_layers: int) -> SearchSpace:
        return SearchSpace(num_layers, self.num_points, self.curve, self.y_min_tenths, self.y_max_tenths)


@dataclass(frozen=True)
class HeldOutConfig:
    """Evaluation of the found scales on examples the search never saw."""

    num_examples: int = 500
    """Held-out source examples (each at the three positions); the paper's 500; 0 = skip."""
    seed: int | None = None
    """Task seed of the held-out build; None = the search's task seed."""
    offset: int | None = None
    """Skip this many source examples first; None = task.num_examples (the ones after the search set)."""


@dataclass(frozen=True)
class SearchConfig:
    """A whole LPES search; the defaults are the paper's settings (configs/search/lpes.yaml)."""

    model: ModelConfig = field(default_factory=ModelConfig)
    """The model to scale."""
    task: TaskConfig = field(default_factory=TaskConfig)
    """The search set and how answers are generated."""
    weights: SubsetWeights = field(default_factory=SubsetWeights)
    """λ_B, λ_M, λ_E of Eq. 7."""
    space: SpaceConfig = field(default_factory=SpaceConfig)
    """Curve type and control points."""
    ga: GAConfig = field(default_factory=GAConfig)
    """Genetic algorithm (Table 9)."""
    held_out: HeldOutConfig = field(default_factory=HeldOutConfig)
    """Evaluation on unseen examples after the search."""

    def __post_init__(self) -> None:
        if self.task.name not in SEARCH_TASKS:
            raise ConfigError(f"task.name must be one of {list(SEARCH_TASKS)}, got {self.task.name!r}")
        if self.task.num_items < 3:
            raise ConfigError(
                f"task.num_items must be >= 3 so that beginning, middle and end are distinct, got {self.task.num_items}"
            )
        for name in ("num_examples", "max_new_tokens", "batch_size"):
            if getattr(self.task, name) < 1:
                raise ConfigError(f"task.{name} must be >= 1, got {getattr(self.task, name)}")
        if self.held_out.num_examples < 0:
            raise ConfigError(f"held_out.num_examples must be >= 0, got {self.held_out.num_examples}")
        if self.model.device not in ("auto", "cpu", "cuda"):
            raise ConfigError(f"model.device must be auto, cpu or cuda, got {self.model.device!r}")

    @classmethod
    def tiny(cls) -> SearchConfig:
        """Seconds on a CPU: the tiny random model, 4 generated 4-pair KV examples, 6 individuals, 2 generations."""
        return cls(
            task=TaskConfig(name="kv", num_items=4, num_examples=4, max_new_tokens=3, batch_size=4),
            space=SpaceConfig(num_points=3),
            ga=GAConfig(population=6, parents=3, generations=2, mutation_offspring=2, crossover_offspring=1),
            held_out=HeldOutConfig(num_examples=4),
        )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Any, source: str = "search config") -> SearchConfig:
        """Build from nested dicts (YAML); unknown keys and wrong types are `ConfigError`s."""
        try:
            return _build(cls, data, source, "")
        except ConfigError:
            raise
        except (ValueError, TypeError) as exc:  # a dataclass's own validation (GAConfig, SubsetWeights, ...)
            raise ConfigError(f"{source}: {exc}") from None

    def dump(self, path: str | Path) -> None:
        Path(path).write_text(yaml.safe_dump(self.to_dict(), sort_keys=False))


def load_config(path: str | Path) -> SearchConfig:
    """Read and validate a YAML search config."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"no search config at {path}; see configs/search/*.yaml")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {' '.join(str(exc).split())}") from None
    return SearchConfig.from_dict({} if data is None else data, source=str(path))


def _build(cls: type, data: Any, source: str, prefix: str) -> Any:
    where = prefix.rstrip(".") or "top level"
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: {where} must be a mapping of keys to values, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    known = [f.name for f in dataclasses.fields(cls) if f.init]
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise ConfigError(f"{source}: unknown key '{prefix}{unknown[0]}' in {where}; valid keys are {known}")
    values = {}
    for name, value in data.items():
        hint = hints[name]
        if dataclasses.is_dataclass(hint):
            values[name] = _build(hint, value, source, f"{prefix}{name}.")
        else:
            values[name] = _check_type(hint, value, source, f"{prefix}{name}")
    return cls(**values)


def _check_type(hint: Any, value: Any, source: str, key: str) -> Any:
    allowed = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    if value is None and type(None) in allowed:
        return None
    if isinstance(value, bool):
        ok = bool in allowed
    elif isinstance(value, int):
        ok = int in allowed or float in allowed
        value = float(value) if int not in allowed else value
    else:
        ok = any(isinstance(value, t) for t in allowed if t not in (type(None), bool, int))
    if not ok:
        names = " or ".join("null" if t is type(None) else t.__name__ for t in allowed)
        raise ConfigError(f"{source}: {key} must be {names}, got {value!r}")
    return value
