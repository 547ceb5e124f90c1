"""The search config: typed dataclasses; jsonargparse reads them from YAML and the command line.

A config file has six sections, each optional (missing keys keep their
defaults, which are the paper's):

    model:    {path, seed, num_layers, dtype, attn_implementation, device}
    task:     {name, num_items, num_examples, seed, data_dir, max_new_tokens, batch_size, max_length, truncate,
               key_chars, template, distinct_keys, chat_template, system_prompt, score}
    weights:  {begin, middle, end}                    # λ of Eq. 7 (search.fitness.SubsetWeights)
    space:    {curve, num_points, y_min_tenths, y_max_tenths}
    ga:       {population, parents, generations, ..., racing} # search.ga.GAConfig (Table 9); racing: search/racing.py
    held_out: {num_examples, seed, offset}

One parser reads them all (`search_parser`, through `search.typed_config`): `python -m search run` on the
command line and with `--config` (`--ga.population 12` overrides a key), `load_config(path)` (a section file
or a run's NAME.config.yaml, whose `out`, `resume`, `no_progress` and `import` keys it accepts),
`SearchConfig.from_dict` (the Python API) and a state's saved GA settings. jsonargparse checks keys and types;
what it cannot check (counts that must agree, ranges) each dataclass checks in `__post_init__`, a
`ConfigError` (a ValueError) naming the key and the fix. `SearchConfig.tiny()` is the seconds-on-a-CPU preset
(configs/search/tiny.yaml).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from jsonargparse import Namespace

from evaluation.prompt_format import PromptFormat
from repo_common.config_cli import SEED_LIMIT, ConfigParser
from search.fitness import Score, SubsetWeights
from search.ga import GAConfig
from search.genome import SearchSpace
from search.search_task import SET_BY_THE_SEARCH, item_parameter
from search.typed_config import ConfigError, add_typed, instantiate, parse_typed

__all__ = ["ConfigError", "SearchConfig", "load_config", "parse_search_args", "search_parser"]

#: The search tasks known without loading the harness's task registry (which imports `datasets`).
BUILT_IN_TASKS = ("mdqa", "kv")
#: kv's own options in `task`, with their defaults: another task takes its options in `task.params`.
KV_OPTIONS = {"key_chars": None, "template": "json", "distinct_keys": None}


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
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """auto (cuda:LOCAL_RANK when CUDA is available, else cpu), cpu, or cuda."""


@dataclass(frozen=True)
class TaskConfig:
    """The search set: one task, the relevant item at the beginning, middle or end."""

    name: str = "mdqa"
    """mdqa (nq-open-oracle file), kv (release file, or generated UUID pairs), or another task: a registered
    name (yours after --import MODULE) or the class_path of a Task subclass (search/search_task.py)."""
    num_items: int = 20
    """k: documents per MDQA prompt, key-value pairs per KV prompt, another task's num_items."""
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
    chat_template: bool = False
    """Wrap each prompt in the tokenizer's chat template (instruction models; evaluation.prompt_format)."""
    system_prompt: str | None = None
    """System message of the chat template (needs chat_template)."""
    score: Score = "metric"
    """metric: the task's metric of each greedy answer (the paper's accuracy); gold_loglik: the gold answer's mean
    log-probability per token, teacher-forced, no generation (continuous: racing drops on fewer questions)."""
    params: dict[str, Any] = field(default_factory=dict)
    """The task's own other parameters (e.g. a user's task's options), passed to it as they are; k, the gold
    positions, num_examples and seed are the search's."""

    def __post_init__(self) -> None:
        kv_only = [k for k, default in KV_OPTIONS.items() if self.name != "kv" and getattr(self, k) != default]
        if kv_only:
            raise ConfigError(
                f"task.{kv_only[0]} is a kv option, and task.name is {self.name!r}: drop it (another task's own "
                "options go in task.params)"
            )
        if self.name in BUILT_IN_TASKS and not self.params:
            return
        key = item_parameter(self.name)  # a task the fitness can use, by a name or class_path that resolves
        set_here = [k for k in self.params if k in (*SET_BY_THE_SEARCH, key)]
        if set_here:
            raise ConfigError(
                f"task.params must not set {set_here}: the search sets them (task.num_items is k, task.num_examples "
                "and task.seed the examples; the gold moves through begin, middle and end)"
            )

    @property
    def prompt_format(self):
        """The harness's `PromptFormat` of these two fields (checked: a system prompt needs the template)."""
        return PromptFormat(self.chat_template, self.system_prompt)


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

    @property
    def held_out_start(self) -> int:
        """The first source example of the held-out check: `held_out.offset`, or the one after the search set."""
        return self.task.num_examples if self.held_out.offset is None else self.held_out.offset

    def __post_init__(self) -> None:
        if self.task.num_items < 3:
            raise ConfigError(
                f"task.num_items must be >= 3 so that beginning, middle and end are distinct, got {self.task.num_items}"
            )
        for name in ("num_examples", "max_new_tokens", "batch_size"):
            if getattr(self.task, name) < 1:
                raise ConfigError(f"task.{name} must be >= 1, got {getattr(self.task, name)}")
        seeds = {"model.seed": self.model.seed, "task.seed": self.task.seed, "ga.seed": self.ga.seed,
                 "held_out.seed": self.held_out.seed}  # fmt: skip
        for name, seed in seeds.items():
            if seed is not None and not 0 <= seed < SEED_LIMIT:
                raise ConfigError(f"{name} must be an integer seed in [0, 2**32), got {seed}")
        if self.held_out.num_examples < 0:
            raise ConfigError(f"held_out.num_examples must be >= 0, got {self.held_out.num_examples}")
        if self.task.system_prompt is not None and not self.task.chat_template:
            raise ConfigError("task.system_prompt needs task.chat_template: true (the system message of the template)")

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
        data = dataclasses.asdict(self)
        if not data["task"]["params"]:
            del data["task"]["params"]  # an mdqa/kv config as it was written before params existed
        racing = data["ga"]["racing"]
        if racing is not None and not racing["exact_bound"]:
            del racing["exact_bound"]  # a racing config as it was written before exact_bound existed
        return data

    @classmethod
    def from_dict(cls, data: Any, source: str = "search config") -> SearchConfig:
        """Build from nested dicts (YAML, or `to_dict`) by `search_parser`: unknown keys, wrong types and failed
        checks are `ConfigError`s of one line."""
        parser = search_parser(source)
        return config_from_options(parser, parse_typed(parser, data, source), source)

    def dump(self, path: str | Path) -> None:
        Path(path).write_text(yaml.safe_dump(self.to_dict(), sort_keys=False))


#: Short flags that `run` and `diagnose` refuse, naming the config key to write (one spelling per option).
SECTION_HINTS = {
    "--model": "--model.path",
    "--task": "--task.name",
    "--num_examples": "--task.num_examples",
    "--num_items": "--task.num_items",
    "--data_dir": "--task.data_dir",
}
#: `run`'s besides those.
RUN_HINTS = {"--generations": "--ga.generations", "--seed": "--ga.seed"}


def add_search_options(parser: ConfigParser) -> None:
    """The six sections as nested options (`--model.path`, `--ga.population`, ...), typed by the dataclasses."""
    add_typed(parser, SearchConfig)


def _flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict) and key != "params":
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _tiny_unless_configured(parser: ConfigParser, args: list[str]) -> None:
    """Without --config and without a model, the defaults are configs/search/tiny.yaml's (a smoke test)."""
    given = {a.split("=", 1)[0] for a in args}
    if not given & {"--config", "--model.path"}:
        parser.set_defaults(_flatten(SearchConfig.tiny().to_dict()))
        parser.tiny_defaults = True  # `python -m search run` says so once the options are valid


def add_search_sections(parser: ConfigParser) -> None:
    """The sections (`--model.path DIR`, `--task.name NAME`, ...) and the tiny defaults without a config or a
    model: what `run` and `diagnose` share."""
    parser.spelling_hints = dict(SECTION_HINTS)
    parser.before_parse = _tiny_unless_configured
    add_search_options(parser)


def add_run_command(parser: ConfigParser, *, out_required: bool) -> None:
    """`python -m search run`'s options: the sections and its own keys (also in its
    NAME.config.yaml): `--import` (the user's modules, e.g. a task), `--out`, `--resume`, `--no_progress`."""
    add_search_sections(parser)
    parser.spelling_hints.update(RUN_HINTS)
    parser.add_import_option()
    parser.add_argument(
        "--out", type=str | None, required=out_required, help="scale file to write, e.g. scales/NAME.json"
    )
    parser.add_argument("--resume", action="store_true", help="continue NAME.state.json if it exists")
    parser.add_argument("--no_progress", action="store_true", help="no progress bar")


def search_parser(prog: str = "search config") -> ConfigParser:
    """The parser of a search config, built as `python -m search run` builds its own (`--import`,
    tiny defaults without a config or model), with `--out` optional, so a run's NAME.config.yaml loads as
    it is."""
    parser = ConfigParser.for_command(prog, "an LPES search config (search/config.py)")
    add_run_command(parser, out_required=False)
    return parser


def config_from_options(parser: ConfigParser, options: Namespace, source: str | None = None) -> SearchConfig:
    """The `SearchConfig` of parsed options (each section's own checks run here: a `ConfigError` names the key)."""
    sections = instantiate(parser, options, source)
    try:
        return SearchConfig(**{f.name: sections[f.name] for f in dataclasses.fields(SearchConfig)})
    except ConfigError as err:
        raise ConfigError(f"{source}: {err}" if source else str(err)) from None


def parse_search_args(args: Sequence[str], prog: str = "search config") -> SearchConfig:
    """The `SearchConfig` of a command line (`--config FILE`, `--ga.population 12`, `--import MODULE`, ...), read
    as `python -m search run` reads it; a mistake is a `ConfigError` of one line."""
    parser = search_parser(prog)
    try:
        options = parser.parse_or_raise(args)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    return config_from_options(parser, options, None)


def load_config(path: str | Path) -> SearchConfig:
    """A YAML search config (configs/search/*.yaml, or a run's NAME.config.yaml), read as `--config` reads it."""
    try:
        return parse_search_args(["--config", str(path)], prog=str(path))
    except ConfigError as err:
        message = str(err)
        raise ConfigError(message if str(path) in message else f"{path}: {message}") from None
