"""Training data sources as typed classes: what `data.train` and `data.val` of a training config name.

A source is written the way LightningCLI writes a model, `class_path` + `init_args`:

    data:
      train:
        class_path: repo_train.data.OlmoNumpyData
        init_args: {mix_file: data/olmo2-stage2/mix.txt, seq_len: 4096}

or on the command line `--data.train SyntheticData --data.train.seq_len 64`.
Each source holds plain names and numbers; `build()` makes the dataset, whose
constructor holds the checks, so a source is validated when built.
`to_config()` / `from_config()` convert to and from that mapping (checkpoints
store it); `from_legacy_dict()` reads the `{"source": "synthetic", ...}` dicts
that configured data before these classes, as checkpoints of that time hold them.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar

import yaml
from transformers import PreTrainedTokenizerBase

from repo_common.registry import Registry
from repo_common.user_code import loaded_subclass
from repo_train.data.base import TokenSequenceDataset
from repo_train.data.olmo_numpy import DOLMA2_EOS_TOKEN_ID, DOLMA2_PAD_TOKEN_ID, DOLMA2_VOCAB_SIZE, OlmoNumpyDataset
from repo_train.data.prompt_completion import PromptCompletionDataset
from repo_train.data.synthetic import SyntheticDataset
from repo_train.data.synthetic_text import SyntheticTextDataset
from repo_train.data.text import TextDataset

#: The package that exports the built-in sources; class paths are written with it (`repo_train.data.TextData`).
PUBLIC_MODULE = "repo_train.data"


#: Every data source by its class name, as a config's `class_path` may name it (`SyntheticData`);
#: `register_data_source` adds each built-in and may add a user's (a dotted class_path needs no registration).
DATA_SOURCES: Registry[type[DataSource]] = Registry("data source")


def register_data_source(cls: type[DataSource]) -> type[DataSource]:
    """Class decorator: make a `DataSource` subclass nameable by its class name in a config."""
    return DATA_SOURCES.register(cls, cls.__name__)


class DataSource(ABC):
    """A source of fixed-length token sequences: a dataclass of plain options with a `build()`.

    Subclass it (a dataclass whose fields have one-line docstrings, as below) to add a source;
    `class_path` then names it in configs, no registry needed.
    """

    #: Its name in the `source:` dicts of old configs and checkpoints (built-in sources only).
    legacy_name: ClassVar[str | None] = None
    #: Every source has one (the model's context must hold it).
    seq_len: int

    @abstractmethod
    def build(self) -> TokenSequenceDataset:
        """The dataset these options describe (its constructor checks them)."""

    @classmethod
    def class_path(cls) -> str:
        """The import path configs name this class by (the package's for the built-in ones, as jsonargparse writes)."""
        exported = getattr(importlib.import_module(PUBLIC_MODULE), cls.__name__, None) is cls
        return f"{PUBLIC_MODULE if exported else cls.__module__}.{cls.__qualname__}"

    def to_config(self) -> dict[str, Any]:
        """`{class_path, init_args}` with every field: plain data for YAML, the CLI and checkpoints."""
        return {"class_path": self.class_path(), "init_args": asdict(self)}

    @staticmethod
    def from_config(
        config: DataSource | Mapping[str, Any], where: str = "data source", *, may_import: bool = True
    ) -> DataSource:
        """A source from `{class_path, init_args}` (a short class name works too); a source is returned as it is.

        `where` (e.g. "data.train") starts each error line. An old `source:` dict is refused with its replacement.
        `may_import=False` resolves the class among those already loaded (`source_class`).
        """
        if isinstance(config, DataSource):
            return config
        if not isinstance(config, Mapping):
            raise ValueError(  # noqa: TRY004 (a user error, reported as one line like the others)
                f"{where}: expected a data source ({{class_path: ..., init_args: {{...}}}}), got {config!r}; "
                f"the sources are {', '.join(c.__name__ for c in BUILT_IN_SOURCES)} (repo_train.data)."
            )
        if "source" in config:
            raise ValueError(legacy_source_message(config, where))
        unknown = sorted(set(config) - {"class_path", "init_args"})
        if unknown or "class_path" not in config:
            problem = f"unknown key(s) {unknown}" if unknown else "no class_path"
            raise ValueError(f"{where}: {problem}; a data source is {{class_path: ..., init_args: {{...}}}}.")
        cls = source_class(config["class_path"], where, may_import=may_import)
        return cls._from_options(dict(config.get("init_args") or {}), f"{where}.init_args")

    @staticmethod
    def from_legacy_dict(data: Mapping[str, Any]) -> DataSource:
        """A source from an old `{"source": "synthetic", "seq_len": 64, ...}` dict (checkpoints written before)."""
        options = dict(data)
        name = options.pop("source", None)
        classes = {cls.legacy_name: cls for cls in LEGACY_SOURCES}
        if name not in classes:
            raise ValueError(f"unknown data source {name!r} in an old 'source:' dict; it was one of {sorted(classes)}.")
        return classes[name]._from_options(options, f"the old {name} data dict")

    @staticmethod
    def from_saved(value: DataSource | Mapping[str, Any] | None) -> DataSource | None:
        """What a checkpoint holds for a source, either form (`{class_path, init_args}` or an old `source:` dict).

        A checkpoint is not trusted to name modules to import (an import runs the module's code): its class
        must be one already loaded, a built-in one or one the run's own config named.
        """
        if isinstance(value, Mapping) and "source" in value:
            return DataSource.from_legacy_dict(value)
        if value is None:
            return None
        return DataSource.from_config(value, "the checkpoint's data source", may_import=False)

    @classmethod
    def _from_options(cls, options: dict[str, Any], where: str) -> DataSource:
        known = {f.name for f in fields(cls)}  # type: ignore[arg-type]
        unknown = sorted(set(options) - known)
        if unknown:
            raise ValueError(f"{where}: unknown {cls.__name__} option(s) {unknown}; valid options are {sorted(known)}.")
        return cls(**options)


def saved_source_options(value: Any) -> dict[str, Any]:
    """The options of a source as a checkpoint saved it, either form, without importing any class it names
    (export reads checkpoints it need not trust)."""
    if not isinstance(value, Mapping):
        return {}
    if "class_path" in value:
        options = value.get("init_args")
        return dict(options) if isinstance(options, Mapping) else {}
    return {k: v for k, v in value.items() if k != "source"}


def source_class(class_path: str, where: str = "data source", *, may_import: bool = True) -> type[DataSource]:
    """The `DataSource` subclass `class_path` names: a dotted import path, or the name of a loaded subclass.

    With `may_import=False` a dotted path too is only looked up among the loaded subclasses.
    """
    fix = (
        f"name one of {', '.join(c.__name__ for c in BUILT_IN_SOURCES)} (repo_train.data) or the import path of "
        "another DataSource subclass"
    )
    if not isinstance(class_path, str) or not class_path:
        raise ValueError(f"{where}: class_path must be a class name, got {class_path!r}; {fix}.")
    if "." in class_path and may_import:
        module_name, _, name = class_path.rpartition(".")
        try:
            found = getattr(importlib.import_module(module_name), name, None)
        except ImportError:
            found = None
    else:
        found = DATA_SOURCES.get(class_path) or loaded_subclass(DataSource, class_path)
    if not (isinstance(found, type) and issubclass(found, DataSource)) or found is DataSource:
        raise ValueError(f"{where}: class_path {class_path!r} is not a data source; {fix}.")
    return found


def legacy_source_message(data: Mapping[str, Any], where: str = "data.train") -> str:
    """The one line for an old `source:` dict given as configuration: what replaced it, for this very dict."""
    options = {k: v for k, v in data.items() if k != "source"}
    classes = {cls.legacy_name: cls for cls in LEGACY_SOURCES}
    cls = classes.get(data.get("source"))
    if cls is not None:
        class_path, note = cls.class_path(), ""
    else:
        class_path = f"{PUBLIC_MODULE}.{'|'.join(c.__name__ for c in LEGACY_SOURCES)}"
        note = f" ({data.get('source')!r} was not a source either)"
    return (
        f"{where}: the 'source:' form was replaced by class_path + init_args{note}; write "
        f"{{class_path: {class_path}, init_args: {_flow(options)}}} (docs/configuring.md lists the sources)"
    )


def _flow(options: Mapping[str, Any]) -> str:
    """`options` as a one-line YAML flow mapping."""
    return yaml.safe_dump(dict(options), default_flow_style=True, width=10**6).strip()


@register_data_source
@dataclass
class SyntheticData(DataSource):
    """Synthetic copy / reverse / key-value / n-gram sequences (no files needed)."""

    legacy_name: ClassVar[str | None] = "synthetic"

    num_samples: int = 4096
    """Number of sequences in the dataset (one epoch)."""
    seq_len: int = 128
    """Tokens per sequence."""
    vocab_size: int = 256
    """Vocabulary size; ids below 16 are special tokens."""
    seed: int = 0
    """Seeds both the content of each sample and the epoch order."""
    copy_weight: float = 1.0
    """Relative frequency of copy episodes."""
    reverse_weight: float = 1.0
    """Relative frequency of reverse episodes."""
    kv_weight: float = 1.0
    """Relative frequency of key-value lookup episodes."""
    ngram_weight: float = 1.0
    """Relative frequency of repeated n-gram episodes."""
    max_span: int = 12
    """Longest span copied or reversed."""
    max_pairs: int = 8
    """Most key-value pairs listed before a query."""

    def build(self) -> SyntheticDataset:
        return SyntheticDataset(**asdict(self))


@register_data_source
@dataclass
class OlmoNumpyData(DataSource):
    """OLMo tokenised numpy shards cut into fixed-length instances."""

    legacy_name: ClassVar[str | None] = "olmo_numpy"

    paths: list[str] = field(default_factory=list)
    """Shard files or globs (e.g. 'data/*.npy'), read in this order."""
    mix_file: str | None = None
    """Text file listing shard paths or globs, one a line; relative to its own directory."""
    seq_len: int = 4096
    """Tokens per instance (4096 in the REPO paper's OLMo-2 stage-2 run)."""
    vocab_size: int = DOLMA2_VOCAB_SIZE
    """Tokenizer vocabulary size; every id must be below it (dolma2: 100278)."""
    eos_token_id: int = DOLMA2_EOS_TOKEN_ID
    """Document separator id (dolma2: 100257)."""
    pad_token_id: int = DOLMA2_PAD_TOKEN_ID
    """Padding id (dolma2: 100277)."""
    dtype: str | None = None
    """Token dtype on disk: 'uint16' or 'uint32'; None picks from vocab_size."""
    seed: int = 0
    """Seeds the epoch order."""
    check_token_ids: bool = True
    """Scan each shard once (cached) for ids >= vocab_size."""
    cache_dir: str | None = None
    """Where the scan results are kept; None is ~/.cache/repo_train/olmo_numpy."""
    tokenizer: str | None = None
    """Optional tokenizer directory to check vocab_size and eos_token_id against."""

    def build(self) -> OlmoNumpyDataset:
        options = asdict(self)
        return OlmoNumpyDataset(options.pop("paths"), **options)


@register_data_source
@dataclass
class TextData(DataSource):
    """Plain text documents tokenised with a Hugging Face tokenizer and packed."""

    legacy_name: ClassVar[str | None] = "text"

    tokenizer: str = ""
    """Tokenizer directory (or hub name when online)."""
    paths: list[str] = field(default_factory=list)
    """Local .txt / .jsonl / .json / .parquet files or globs."""
    hub_dataset: str | None = None
    """Hub dataset name, instead of paths."""
    hub_config: str | None = None
    """Hub dataset configuration name."""
    split: str = "train"
    """Split to read (slices such as 'train[:10%]' work)."""
    text_field: str = "text"
    """Field holding the document text (jsonl / json / parquet)."""
    txt_sample_by: str = "line"
    """What one document is in .txt files: 'line', 'paragraph' or 'document' (at most 64 MiB each)."""
    seq_len: int = 1024
    """Tokens per sequence."""
    vocab_size: int | None = None
    """Expected vocabulary size (e.g. the model's); None takes the tokenizer's."""
    seed: int = 0
    """Seeds the epoch order."""
    cache_dir: str | None = None
    """`datasets` cache directory; None uses the Hugging Face default."""
    num_proc: int | None = None
    """Processes for tokenisation; None tokenises in this process."""

    def build(self, tokenizer: PreTrainedTokenizerBase | None = None) -> TextDataset:
        """Build with the configured tokenizer, or with `tokenizer` if one is passed."""
        options = asdict(self)
        paths, name = options.pop("paths"), options.pop("tokenizer")
        if tokenizer is None and not name:
            raise ValueError("the text data source needs a tokenizer: set 'tokenizer' to a tokenizer directory.")
        return TextDataset(paths, tokenizer=tokenizer if tokenizer is not None else name, **options)


@register_data_source
@dataclass
class PromptCompletionData(DataSource):
    """Prompt / completion JSONL, one example a sequence, loss on the completion only."""

    legacy_name: ClassVar[str | None] = "prompt_completion"

    tokenizer: str = ""
    """Tokenizer directory."""
    paths: list[str] = field(default_factory=list)
    """Local .jsonl files or globs, one {"prompt", "completion"} object a line."""
    seq_len: int = 1024
    """Tokens per sequence (examples are right-padded; a longer one is an error)."""
    prompt_field: str = "prompt"
    """Field holding the prompt."""
    completion_field: str = "completion"
    """Field holding the completion (the only tokens with a loss, plus EOS)."""
    vocab_size: int | None = None
    """Expected vocabulary size (e.g. the model's); None takes the tokenizer's."""
    seed: int = 0
    """Seeds the epoch order."""

    def build(self) -> PromptCompletionDataset:
        options = asdict(self)
        paths, name = options.pop("paths"), options.pop("tokenizer")
        if not name:
            raise ValueError("the prompt_completion data source needs a tokenizer: set 'tokenizer' to a directory.")
        return PromptCompletionDataset(paths, tokenizer=name, **options)


@register_data_source
@dataclass
class SyntheticTextData(DataSource):
    """The synthetic episodes written as text lines and tokenised (by default with the built-in byte tokenizer):
    the tiny configs' data, so that their export carries the tokenizer the model was trained with."""

    num_samples: int = 4096
    """Number of sequences in the dataset (one epoch)."""
    seq_len: int = 128
    """Tokens per sequence."""
    tokenizer: str = "byte"
    """'byte' (the built-in byte tokenizer: 258 ids, <pad>=0, <eos>=1) or a tokenizer directory."""
    seed: int = 0
    """Seeds both the content of each sample and the epoch order."""
    copy_weight: float = 1.0
    """Relative frequency of copy lines."""
    reverse_weight: float = 1.0
    """Relative frequency of reverse lines."""
    kv_weight: float = 1.0
    """Relative frequency of key-value lookup lines."""
    ngram_weight: float = 1.0
    """Relative frequency of repeated n-gram lines."""
    max_span: int = 12
    """Longest span copied or reversed, in words."""
    max_pairs: int = 8
    """Most key-value pairs listed before a query."""
    num_words: int = 240
    """Distinct content words (Zipf-distributed, written as letters: a, b, ..., z, aa, ...)."""
    vocab_size: int | None = None
    """Expected vocabulary size (e.g. the model's); None takes the tokenizer's."""

    def build(self) -> SyntheticTextDataset:
        return SyntheticTextDataset(**asdict(self))


#: The sources this package registers, in the order the docs list them.
BUILT_IN_SOURCES: tuple[type[DataSource], ...] = tuple(DATA_SOURCES.values())
#: The sources that old configs and checkpoints named by a `source:` string.
LEGACY_SOURCES = tuple(cls for cls in BUILT_IN_SOURCES if cls.legacy_name is not None)
