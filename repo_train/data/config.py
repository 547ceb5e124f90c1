"""Typed configs of the three data sources: plain names and numbers, so they live in YAML and CLIs.

`to_dict()` adds the source name under "source"; `from_dict()` reads it back and
rejects unknown keys, naming the valid ones. `build()` makes the dataset; the
dataset constructors hold all the checks, so a config is validated when built.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar

from transformers import PreTrainedTokenizerBase

from repo_train.data.olmo_numpy import DOLMA2_EOS_TOKEN_ID, DOLMA2_PAD_TOKEN_ID, DOLMA2_VOCAB_SIZE, OlmoNumpyDataset
from repo_train.data.prompt_completion import PromptCompletionDataset
from repo_train.data.synthetic import SyntheticDataset
from repo_train.data.text import TextDataset


class _DictRoundTrip:
    source: ClassVar[str]

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, **asdict(self)}  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]):
        values = dict(data)
        source = values.pop("source", cls.source)
        if source != cls.source:
            raise ValueError(f"{cls.__name__} reads source {cls.source!r}, got {source!r}: use that source's config.")
        known = {f.name for f in fields(cls)}  # type: ignore[arg-type]
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown {cls.source} data option(s) {unknown}; valid options are {sorted(known)}.")
        return cls(**values)


@dataclass
class SyntheticDataConfig(_DictRoundTrip):
    """Synthetic copy / reverse / key-value / n-gram sequences (no files needed)."""

    source: ClassVar[str] = "synthetic"

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


@dataclass
class OlmoNumpyDataConfig(_DictRoundTrip):
    """OLMo tokenised numpy shards cut into fixed-length instances."""

    source: ClassVar[str] = "olmo_numpy"

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


@dataclass
class TextDataConfig(_DictRoundTrip):
    """Plain text documents tokenised with a Hugging Face tokenizer and packed."""

    source: ClassVar[str] = "text"

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
    """What one document is in .txt files: 'line', 'paragraph' or 'document'."""
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


@dataclass
class PromptCompletionDataConfig(_DictRoundTrip):
    """Prompt / completion JSONL, one example a sequence, loss on the completion only."""

    source: ClassVar[str] = "prompt_completion"

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


DataConfig = SyntheticDataConfig | OlmoNumpyDataConfig | TextDataConfig | PromptCompletionDataConfig
