"""Plain text through `datasets`, tokenised and packed into fixed-length sequences.

Documents come from local txt / jsonl / json / parquet files (a configurable text
field) or a hub dataset. Each non-empty document is tokenised without special
tokens and followed by EOS, the way OLMo's shards are built; all documents are
concatenated in order and cut into `seq_len` windows, dropping the tail.
Tokenisation is a batched `Dataset.map`, so `datasets` caches it by fingerprint and
a second run with the same files and tokenizer reads the cached Arrow file. The
packed view is a zero-copy look at that file's token column, never a Python list.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import torch
from transformers import AutoTokenizer, PreTrainedTokenizerBase

from repo_common.cli_errors import first_line
from repo_common.json_files import check_line_lengths
from repo_common.model_directory import check_tokenizer_files, looks_like_hub_id, no_such_directory
from repo_train.byte_tokenizer import byte_tokenizer, names_byte_tokenizer
from repo_train.data.base import TokenSequenceDataset, check_seed, check_seq_len, expand_paths

#: file suffix -> `datasets` builder that reads it.
BUILDERS = {".txt": "text", ".jsonl": "json", ".json": "json", ".parquet": "parquet"}
#: what one document is in a .txt file (the `sample_by` option of the `text` builder).
TXT_SAMPLE_BY = ("line", "paragraph", "document")
#: The longest document a .txt file may hold (a line, a paragraph or the whole file, by `txt_sample_by`):
#: `datasets`' text reader and the tokenizer hold one document whole, so a multi-GB one would be a MemoryError.
MAX_TXT_DOCUMENT_BYTES = 64 * 2**20


def check_txt_documents(path: Path, sample_by: str) -> None:
    """Refuse a .txt file with a document longer than `MAX_TXT_DOCUMENT_BYTES`, streaming it (never more than
    that many bytes of it in memory): one line naming the file, the line and the fix."""
    limit = MAX_TXT_DOCUMENT_BYTES
    if sample_by == "document":
        size = path.stat().st_size
        if size > limit:
            raise ValueError(
                f"{path} is {size:,} bytes, more than one document may be ({limit:,} bytes) with txt_sample_by="
                "document (the whole file is one document): split it into files of one document each"
            )
        return
    with open(path, "rb") as handle:
        number, paragraph, start = 0, 0, 1
        while line := handle.readline(limit + 1):
            number += 1
            if sample_by == "paragraph" and not line.strip(b"\r\n"):  # datasets splits paragraphs at "\n\n"
                paragraph, start = 0, number + 1
                continue
            paragraph = paragraph + len(line) if sample_by == "paragraph" else len(line)
            if paragraph > limit:
                where = f"{path}:{number}" if sample_by == "line" else f"{path}:{start}-{number}"
                unit = "a line" if sample_by == "line" else "a paragraph (up to a blank line)"
                raise ValueError(
                    f"{where} is longer than {limit:,} bytes: with txt_sample_by={sample_by} a .txt file holds one "
                    f"document {unit}, and one this long does not fit in memory (is it one huge document, or not "
                    "text?); split it into shorter documents"
                )


def load_tokenizer(tokenizer: str | Path | PreTrainedTokenizerBase) -> PreTrainedTokenizerBase:
    """A tokenizer object as is, `byte` (the built-in byte tokenizer, which needs no files), or one loaded from a
    local directory (or a hub name, when online)."""
    if isinstance(tokenizer, PreTrainedTokenizerBase):
        return tokenizer
    if names_byte_tokenizer(tokenizer):
        return byte_tokenizer()
    location = Path(tokenizer).expanduser()
    if location.is_dir():
        check_tokenizer_files(location)  # garbage JSON or the directory's own code: one line naming the file
    elif not looks_like_hub_id(str(tokenizer)):  # a local-looking path that is not there: no ~30 s of hub retries
        raise ValueError(
            f"could not load the tokenizer {str(tokenizer)!r}: {no_such_directory(str(tokenizer))}; pass a local "
            "directory holding the tokenizer files (e.g. tokenizer.json), or a hub id org/name already in the local cache"
        )
    try:
        return AutoTokenizer.from_pretrained(str(location) if location.exists() else str(tokenizer))
    except Exception as error:  # the tokenizers library raises plain Exceptions for a malformed tokenizer.json
        detail = first_line(error)
        raise ValueError(
            f"could not load the tokenizer {str(tokenizer)!r} ({detail}): pass a local directory holding the tokenizer "
            "files (e.g. tokenizer.json), or a tokenizer object."
        ) from error


def tokenizer_vocab_size(tokenizer: PreTrainedTokenizerBase) -> int:
    """1 + the largest id the tokenizer can emit (more than len() when its ids have gaps, as cl100k's do)."""
    return max(len(tokenizer), max(tokenizer.get_vocab().values(), default=-1) + 1)


def adopt_tokenizer(
    dataset: TokenSequenceDataset,
    tokenizer: str | Path | PreTrainedTokenizerBase,
    vocab_size: int | None,
    eos_role: str,
) -> None:
    """Set `tokenizer`, `vocab_size`, `eos_token_id` and `pad_token_id` of a tokenising data source.

    `vocab_size` (e.g. the model's) must cover every id the tokenizer emits; the
    pad id falls back to EOS. `eos_role` says in the error what EOS is needed for.
    """
    dataset.tokenizer = load_tokenizer(tokenizer)
    if dataset.tokenizer.eos_token_id is None:
        raise ValueError(f"the tokenizer has no EOS token, which {eos_role}: set tokenizer.eos_token.")
    size = tokenizer_vocab_size(dataset.tokenizer)
    if vocab_size is not None and size > vocab_size:
        raise ValueError(
            f"the tokenizer has ids up to {size - 1} but vocab_size={vocab_size}: use the model's own "
            f"tokenizer, or set vocab_size >= {size}."
        )
    dataset.vocab_size = size if vocab_size is None else vocab_size
    dataset.eos_token_id = int(dataset.tokenizer.eos_token_id)
    pad = dataset.tokenizer.pad_token_id
    dataset.pad_token_id = dataset.eos_token_id if pad is None else int(pad)


def _tokenize(batch: dict[str, list[Any]], tokenizer: PreTrainedTokenizerBase, field: str, eos: int) -> dict:
    texts = [text for text in batch[field] if text is not None and text.strip()]
    ids = tokenizer(texts, add_special_tokens=False, verbose=False)["input_ids"] if texts else []
    return {"input_ids": [doc + [eos] for doc in ids]}


def find_unreadable_line(files: Sequence[Path]) -> str | None:
    """The first problem a reader of these files meets, as "FILE:LINE ... : fix", or None if none is found.

    Only called after `datasets` failed (its errors name neither file nor
    line); streams each file once. .txt must be UTF-8; .jsonl lines must be
    JSON objects (blank lines are skipped); a .json file is one JSON document.
    """
    for path in files:
        suffix = path.suffix.lower()
        if suffix == ".json":
            try:
                json.loads(path.read_bytes().decode("utf-8"))
            except UnicodeDecodeError as err:
                return (
                    f"{path} is not UTF-8 text (byte {err.object[err.start]:#04x} at offset {err.start}): re-encode it"
                )
            except json.JSONDecodeError as err:
                return f"{path}:{err.lineno} is not valid JSON ({err.msg}, column {err.colno}): fix or drop that file"
            continue
        if suffix not in (".txt", ".jsonl"):
            continue
        with open(path, "rb") as handle:
            for number, raw in enumerate(handle, 1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as err:
                    return (
                        f"{path}:{number} is not UTF-8 text (byte {err.object[err.start]:#04x} at column "
                        f"{err.start + 1}): re-encode the file as UTF-8 or drop it"
                    )
                if suffix == ".txt" or not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as err:
                    return (
                        f"{path}:{number} is not valid JSON ({err.msg}, column {err.colno}): each line of a .jsonl "
                        "file must be one JSON object; fix or delete that line"
                    )
                if not isinstance(record, dict):
                    return (
                        f"{path}:{number} holds a JSON {type(record).__name__}, not an object: each line of a .jsonl "
                        'file must be one object such as {"text": "..."}'
                    )
    return None


class TextDataset(TokenSequenceDataset):
    """Tokenised, EOS-separated, concatenated documents cut into `seq_len`-token sequences."""

    def __init__(
        self,
        paths: Sequence[str | Path] = (),
        *,
        tokenizer: str | Path | PreTrainedTokenizerBase,
        seq_len: int,
        hub_dataset: str | None = None,
        hub_config: str | None = None,
        split: str = "train",
        text_field: str = "text",
        txt_sample_by: str = "line",
        vocab_size: int | None = None,
        seed: int = 0,
        cache_dir: str | Path | None = None,
        num_proc: int | None = None,
    ) -> None:
        check_seq_len(seq_len)
        check_seed(seed)
        adopt_tokenizer(self, tokenizer, vocab_size, eos_role="separates documents")
        self.seq_len = seq_len
        self.seed = seed

        raw = self._load(paths, hub_dataset, hub_config, split, txt_sample_by, cache_dir)
        if text_field not in raw.column_names:
            raise ValueError(
                f"the data has no field {text_field!r}; its fields are {raw.column_names}: set text_field."
            )
        feature = raw.features[text_field]
        if getattr(feature, "dtype", None) not in ("string", "large_string"):
            raise ValueError(f"field {text_field!r} holds {feature}, not text: set text_field to a string field.")
        self.tokenized = raw.map(
            _tokenize,
            batched=True,
            remove_columns=raw.column_names,
            features=datasets.Features({"input_ids": datasets.List(datasets.Value("int32"))}),
            fn_kwargs={"tokenizer": self.tokenizer, "field": text_field, "eos": self.eos_token_id},
            num_proc=num_proc,
            desc="tokenizing",
        )
        self._chunks: list[np.ndarray] | None = None
        self.num_tokens = int(sum(len(chunk) for chunk in self.chunks))
        if self.num_tokens < seq_len:
            raise ValueError(
                f"the text has {self.num_tokens} tokens (with one EOS per document), fewer than seq_len={seq_len}: "
                "add documents or lower seq_len."
            )
        largest = max(int(chunk.max()) for chunk in self.chunks if len(chunk))
        if largest >= self.vocab_size:
            raise ValueError(
                f"the tokenizer produced token id {largest} >= vocab_size={self.vocab_size}, more than its vocabulary "
                "reports: set vocab_size above the largest id."
            )

    @staticmethod
    def _load(
        paths: Sequence[str | Path],
        hub_dataset: str | None,
        hub_config: str | None,
        split: str,
        txt_sample_by: str,
        cache_dir: str | Path | None,
    ) -> datasets.Dataset:
        cache = None if cache_dir is None else str(cache_dir)
        if bool(paths) == bool(hub_dataset):
            raise ValueError("give exactly one of 'paths' (local text files or globs) and 'hub_dataset'.")
        if hub_dataset:
            return datasets.load_dataset(hub_dataset, hub_config, split=split, cache_dir=cache)
        files = expand_paths(paths, what="text")
        suffixes = {path.suffix.lower() for path in files}
        unknown = suffixes - set(BUILDERS)
        if unknown:
            raise ValueError(f"cannot read {sorted(unknown)} files: text files must end in one of {sorted(BUILDERS)}.")
        builders = {BUILDERS[suffix] for suffix in suffixes}
        if len(builders) > 1:
            raise ValueError(f"the files mix formats ({sorted(suffixes)}): give one format per data source.")
        builder = builders.pop()
        options: dict[str, Any] = {}
        if builder == "text":
            if txt_sample_by not in TXT_SAMPLE_BY:
                raise ValueError(f"txt_sample_by must be one of {TXT_SAMPLE_BY}, got {txt_sample_by!r}.")
            options["sample_by"] = txt_sample_by
        for path in files:
            if path.stat().st_size == 0:
                raise ValueError(
                    f"the text data file {str(path)!r} is empty: add documents to it or drop it from paths."
                )
            if path.suffix.lower() == ".jsonl":
                check_line_lengths(path)  # datasets' json reader would hold a multi-GB line in memory whole
            elif path.suffix.lower() == ".txt":
                check_txt_documents(path, txt_sample_by)  # and its text reader a multi-GB line (or paragraph)
        # A failing read would print half a progress bar and datasets' own log lines before the one-line error.
        bars_were_off, verbosity = datasets.are_progress_bars_disabled(), datasets.logging.get_verbosity()
        datasets.disable_progress_bars()
        datasets.logging.set_verbosity(datasets.logging.CRITICAL)
        try:
            data = datasets.load_dataset(
                builder, data_files=[str(p) for p in files], split=split, cache_dir=cache, **options
            )
        except Exception as error:  # datasets wraps parser errors in its own types: find the file and line
            problem = find_unreadable_line(files)
            if problem is not None:
                raise ValueError(f"could not read {len(files)} {builder} file(s): {problem}") from error
            raise ValueError(
                f"could not read {len(files)} {builder} file(s) starting with {str(files[0])!r}: {error}. "
                "Check that every file is valid and uses the suffix of its format."
            ) from error
        finally:
            datasets.logging.set_verbosity(verbosity)
            if not bars_were_off:
                datasets.enable_progress_bars()
        return data

    @property
    def chunks(self) -> list[np.ndarray]:
        """The concatenated token stream as zero-copy views of the cached Arrow column, chunk by chunk."""
        if self._chunks is None:
            column = self.tokenized.data.column("input_ids")
            self._chunks = [chunk.flatten().to_numpy(zero_copy_only=True) for chunk in column.chunks]
            self._chunk_starts = np.cumsum([0] + [len(chunk) for chunk in self._chunks])
        return self._chunks

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_chunks"] = None  # views are rebuilt from the memory-mapped table, not pickled into workers
        return state

    def __len__(self) -> int:
        return self.num_tokens // self.seq_len

    def tokens(self, start: int, stop: int) -> np.ndarray:
        """Tokens [start, stop) of the concatenated stream."""
        chunks = self.chunks
        pieces = []
        which = int(np.searchsorted(self._chunk_starts, start, side="right")) - 1
        while start < stop:
            local = start - int(self._chunk_starts[which])
            piece = chunks[which][local : local + stop - start]
            pieces.append(piece)
            start += len(piece)
            which += 1
        return np.concatenate(pieces) if pieces else np.empty(0, dtype=np.int32)

    def _sequence(self, index: int) -> torch.Tensor:
        start = index * self.seq_len
        return torch.from_numpy(self.tokens(start, start + self.seq_len).astype(np.int64))
