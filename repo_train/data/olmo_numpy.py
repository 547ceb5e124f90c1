"""OLMo's tokenised numpy shards, cut into fixed-length instances.

On-disk format (as written by the Dolma toolkit and read by OLMo): a raw, headerless
array of token ids (uint32 for the dolma2 tokenizer, uint16 for older ones), documents
separated by EOS. Files are often named `*.npy` but are *not* `np.save` files.
Following OLMo's FSL scheme, file f holds `len(f) // seq_len` consecutive windows and
its shorter tail is dropped; instance numbers run through the files in the given order.

What comes from olmo_core: the dolma2 ids (`TokenizerConfig.dolma2()`'s, spelled out below and
checked against it by the tests) and the reader, `NumpyFSLDataset` (per-file instance counts,
reading instance i), imported when a dataset is built: olmo_core imports boto3 and Google Cloud
Storage at start-up, which nothing else here needs (~22 MiB of wheels a GPU machine must be
carried, and start-up time for every command that imports the data package). It runs here as is:
without a process group it uses rank 0, and the plain FSL dataset needs no `prepare()`
cache. Implemented here: mix files (a local list of paths; olmo_core's mixes are named
remote mixes with `{TOKENIZER}` templates), local glob expansion with specific errors,
file checks (empty, size not a multiple of the dtype, `np.save` header), the cached
max-token-id scan, an optional check against a Hugging Face tokenizer, and the seeded
order / resume (olmo_core keeps those inside its own data loader and trainer, which
this project does not use).
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from bisect import bisect_right
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from transformers import PreTrainedTokenizerBase

from repo_train.data.base import TokenSequenceDataset, check_seed, check_seq_len, expand_paths
from repo_train.data.text import load_tokenizer, tokenizer_vocab_size

log = logging.getLogger(__name__)

# olmo_core's `TokenizerConfig.dolma2()` (tests/data/test_data_olmo_numpy.py compares them).
DOLMA2_VOCAB_SIZE: int = 100278
DOLMA2_EOS_TOKEN_ID: int = 100257
DOLMA2_PAD_TOKEN_ID: int = 100277
#: OLMo-2's embedding rows: the vocab padded to a multiple of 128 (`padded_vocab_size(128)`).
DOLMA2_PADDED_VOCAB_SIZE: int = 100352

DTYPES = ("uint8", "uint16", "uint32", "uint64")
_NPY_MAGIC = b"\x93NUMPY"
_SCAN_CHUNK = 1 << 24  # tokens per memmap chunk when scanning for the largest id


def dtype_for_vocab(vocab_size: int) -> np.dtype:
    """The dtype the Dolma toolkit writes: uint16 while the largest id fits (vocab <= 65536), else uint32."""
    return np.dtype(np.uint16 if vocab_size - 1 <= np.iinfo(np.uint16).max else np.uint32)


#: The largest mix file read (a list of paths: the 1B stage-2 mix is ~100 kB).
MAX_MIX_FILE_BYTES = 16 * 2**20


def read_mix_file(mix_file: str | Path) -> list[Path]:
    """Paths or globs listed one a line (`#` starts a comment line), relative to the mix file's directory."""
    mix_path = Path(mix_file).expanduser()
    if not mix_path.is_file():
        raise FileNotFoundError(f"mix file {str(mix_path)!r} does not exist: check the path of 'mix_file'.")
    size = mix_path.stat().st_size
    if size > MAX_MIX_FILE_BYTES:  # a shard passed as the mix file: never read gigabytes of tokens as text
        raise ValueError(
            f"mix file {str(mix_path)!r} is {size / 2**20:,.0f} MB, not a list of shard paths (one a line); is it a "
            "shard itself? pass the text file that lists the shards as 'mix_file'."
        )
    data = mix_path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(
            f"mix file {str(mix_path)!r} is binary, not a text list of shard paths (byte {data[err.start]:#04x} at "
            f"offset {err.start}); is it a shard itself? pass the text file that lists the shards as 'mix_file'."
        ) from None
    lines = [line.strip() for line in text.splitlines()]
    entries = [line for line in lines if line and not line.startswith("#")]
    if not entries:
        raise ValueError(f"mix file {str(mix_path)!r} lists no paths: add one shard path or glob per line.")
    return expand_paths(entries, base_dir=mix_path.resolve().parent, what=f"shard (from mix file {mix_path.name})")


def _file_key(path: Path, dtype: np.dtype) -> str:
    stat = path.stat()
    return f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|{dtype.name}"


class MaxTokenIdCache:
    """Largest token id per (file, size, mtime, dtype) in a small JSON file, so big shards are scanned once."""

    def __init__(self, cache_dir: str | Path | None) -> None:
        self.path = None if cache_dir is None else Path(cache_dir).expanduser() / "max_token_ids.json"
        self._entries: dict[str, int] = {}
        if self.path is not None and self.path.is_file():
            try:
                self._entries = {str(k): int(v) for k, v in json.loads(self.path.read_text()).items()}
            except (ValueError, AttributeError):
                log.warning("ignoring unreadable max-token-id cache %s", self.path)

    def max_token_ids(self, paths: Sequence[Path], dtype: np.dtype) -> list[int]:
        """The largest id of each file, scanning only files not seen before (saved every 30 s and at the end)."""
        keys = [_file_key(path, dtype) for path in paths]
        missing = [(key, path) for key, path in zip(keys, paths, strict=True) if key not in self._entries]
        if missing:
            log.info("scanning %d shard(s) once for their largest token id (cached in %s)", len(missing), self.path)
            last_save = time.monotonic()
            for key, path in missing:
                self._entries[key] = _scan_max(path, dtype)
                if time.monotonic() - last_save > 30:
                    self._save()
                    last_save = time.monotonic()
            self._save()
        return [self._entries[key] for key in keys]

    def _save(self) -> None:
        if self.path is None:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile("w", dir=self.path.parent, delete=False, suffix=".tmp") as f:
                json.dump(self._entries, f)
            os.replace(f.name, self.path)  # atomic: concurrent ranks never read half a file
        except OSError as error:
            log.warning("could not write the max-token-id cache %s (%s); files will be rescanned", self.path, error)


def _scan_max(path: Path, dtype: np.dtype) -> int:
    tokens = np.memmap(path, dtype=dtype, mode="r")
    largest = 0
    for start in range(0, len(tokens), _SCAN_CHUNK):
        largest = max(largest, int(tokens[start : start + _SCAN_CHUNK].max()))
    del tokens
    return largest


def _first_at_least(path: Path, dtype: np.dtype, limit: int) -> tuple[int, int]:
    """(position, id) of the first token id >= limit; only called once an error is certain."""
    tokens = np.memmap(path, dtype=dtype, mode="r")
    for start in range(0, len(tokens), _SCAN_CHUNK):
        hits = np.flatnonzero(tokens[start : start + _SCAN_CHUNK] >= limit)
        if hits.size:
            return start + int(hits[0]), int(tokens[start + hits[0]])
    raise AssertionError("no offending id found")


def default_cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", "~/.cache")).expanduser() / "repo_train" / "olmo_numpy"


class OlmoNumpyDataset(TokenSequenceDataset):
    """Fixed-length windows of OLMo token shards, given as paths, globs and/or a mix file."""

    def __init__(
        self,
        paths: Sequence[str | Path] = (),
        *,
        mix_file: str | Path | None = None,
        seq_len: int = 4096,
        vocab_size: int = DOLMA2_VOCAB_SIZE,
        eos_token_id: int = DOLMA2_EOS_TOKEN_ID,
        pad_token_id: int = DOLMA2_PAD_TOKEN_ID,
        dtype: str | None = None,
        seed: int = 0,
        check_token_ids: bool = True,
        cache_dir: str | Path | None = None,
        tokenizer: str | Path | PreTrainedTokenizerBase | None = None,
    ) -> None:
        check_seq_len(seq_len)
        check_seed(seed)
        for name, token_id in (("eos_token_id", eos_token_id), ("pad_token_id", pad_token_id)):
            if not 0 <= token_id < vocab_size:
                raise ValueError(f"{name}={token_id} is outside the vocabulary [0, {vocab_size}): check vocab_size.")
        self.dtype = self._pick_dtype(dtype, vocab_size)
        files = expand_paths(paths, what="shard") if paths else []
        if mix_file is not None:
            files += read_mix_file(mix_file)
        if not files:
            raise ValueError("no shards given: set 'paths' (files or globs) and/or 'mix_file'.")
        for path in files:
            self._check_file(path)
        if tokenizer is not None:
            self._check_tokenizer(load_tokenizer(tokenizer), vocab_size, eos_token_id)
        if check_token_ids:
            cache = MaxTokenIdCache(default_cache_dir() if cache_dir is None else cache_dir)
            for path, largest in zip(files, cache.max_token_ids(files, self.dtype), strict=True):
                if largest >= vocab_size:
                    position, token_id = _first_at_least(path, self.dtype, vocab_size)
                    raise ValueError(
                        f"shard {str(path)!r} holds token id {token_id} (at token {position}) >= "
                        f"vocab_size={vocab_size}: the file was made with another tokenizer or is read with the "
                        f"wrong dtype ({self.dtype.name}); fix vocab_size / dtype or drop the file."
                    )
        self.files = files
        self.seq_len = seq_len
        self.vocab_size = vocab_size
        self.eos_token_id = eos_token_id
        self.pad_token_id = pad_token_id
        self.seed = seed
        from olmo_core.data import NumpyFSLDataset  # heavy: boto3 and Google Cloud at import (see the docstring)

        self._reader = NumpyFSLDataset(
            *[str(p) for p in files],
            sequence_length=seq_len,
            pad_token_id=pad_token_id,
            eos_token_id=eos_token_id,
            vocab_size=vocab_size,
            dtype=self.dtype.type,
        )
        self._starts = [start for start, _ in self._reader.offsets]
        if len(self._reader) == 0:
            longest = max(p.stat().st_size for p in files) // self.dtype.itemsize
            raise ValueError(
                f"no instance fits: the longest shard has {longest} tokens, fewer than seq_len={seq_len} "
                "(each file's tail shorter than seq_len is dropped); lower seq_len or add data."
            )

    @staticmethod
    def _pick_dtype(dtype: str | None, vocab_size: int) -> np.dtype:
        if dtype is None:
            return dtype_for_vocab(vocab_size)
        name = dtype if isinstance(dtype, str) else getattr(np.dtype(dtype), "name", "")
        if name not in DTYPES:
            raise ValueError(f"dtype must be one of {DTYPES} or None (chosen from vocab_size), got {dtype!r}.")
        chosen = np.dtype(name)
        if vocab_size - 1 > np.iinfo(chosen).max:
            raise ValueError(
                f"dtype {chosen.name} cannot hold token ids up to {vocab_size - 1}: use "
                f"{dtype_for_vocab(vocab_size).name} or leave dtype unset."
            )
        return chosen

    @staticmethod
    def _check_tokenizer(tokenizer: PreTrainedTokenizerBase, vocab_size: int, eos_token_id: int) -> None:
        """The tokenizer that will read the model's output must be the one the shards were made with."""
        size = tokenizer_vocab_size(tokenizer)
        if size != vocab_size:
            raise ValueError(
                f"the tokenizer has ids 0..{size - 1} but vocab_size={vocab_size}: the shards were made with another "
                f"tokenizer, or vocab_size is wrong (set vocab_size={size} if this is the shards' tokenizer)."
            )
        if tokenizer.eos_token_id != eos_token_id:
            raise ValueError(
                f"the tokenizer's EOS id is {tokenizer.eos_token_id} but eos_token_id={eos_token_id}: set eos_token_id "
                "to the tokenizer's, or use the tokenizer the shards were made with."
            )

    def _check_file(self, path: Path) -> None:
        size = path.stat().st_size
        if size == 0:
            raise ValueError(f"shard {str(path)!r} is empty: remove it from the paths / mix file.")
        with open(path, "rb") as f:
            if f.read(len(_NPY_MAGIC)) == _NPY_MAGIC:
                raise ValueError(
                    f"shard {str(path)!r} was written by np.save (it has a .npy header); OLMo shards are raw arrays: "
                    f"rewrite it with np.load(path).astype('{self.dtype.name}').tofile(path)."
                )
        if size % self.dtype.itemsize:
            raise ValueError(
                f"shard {str(path)!r} has {size} bytes, not a multiple of {self.dtype.itemsize} ({self.dtype.name}): "
                "set dtype to the one the file was written with (uint32 for dolma2, uint16 for older tokenizers)."
            )

    @property
    def padded_vocab_size(self) -> int:
        """The embedding size OLMo would use: vocab_size rounded up to a multiple of 128."""
        return -(-self.vocab_size // 128) * 128

    def __len__(self) -> int:
        return len(self._reader)

    def instances_per_file(self) -> list[int]:
        return [end - start for start, end in self._reader.offsets]

    def locate(self, index: int) -> tuple[Path, int]:
        """(file, token offset) where instance `index` starts."""
        if not 0 <= index < len(self):
            raise IndexError(f"sample index {index} is out of range for a dataset of {len(self)} sequences.")
        file_index = bisect_right(self._starts, index) - 1  # the last of equal starts: skips files with no instance
        return self.files[file_index], (index - self._starts[file_index]) * self.seq_len

    def _sequence(self, index: int) -> torch.Tensor:
        return self._reader[index]["input_ids"]
