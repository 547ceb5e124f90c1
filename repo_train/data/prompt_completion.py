"""Prompt / completion pairs, one per sequence, with the loss on the completion only.

For supervised tasks (retrieval, reversal) where the prompt is mostly a fixed
template and random content: training on every token spends the gradient on
what cannot be learned, so here the labels are -100 on the prompt and the
padding. Each example is prompt + completion + EOS, right-padded to `seq_len`;
an example longer than `seq_len` is an error, never silently cut.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from transformers import PreTrainedTokenizerBase

from repo_common.json_files import json_lines
from repo_train.data.base import TokenSequenceDataset, check_seed, check_seq_len, expand_paths
from repo_train.data.text import adopt_tokenizer

IGNORE_INDEX = -100


class PromptCompletionDataset(TokenSequenceDataset):
    """`{"prompt", "completion"}` JSONL lines -> `input_ids` and `labels` (completion tokens only)."""

    def __init__(
        self,
        paths: Sequence[str | Path],
        *,
        tokenizer: str | Path | PreTrainedTokenizerBase,
        seq_len: int,
        prompt_field: str = "prompt",
        completion_field: str = "completion",
        vocab_size: int | None = None,
        seed: int = 0,
    ) -> None:
        check_seq_len(seq_len)
        check_seed(seed)
        adopt_tokenizer(self, tokenizer, vocab_size, eos_role="ends each completion")
        self.seq_len, self.seed = seq_len, seed
        self.input_ids, self.labels = self._encode(expand_paths(paths), prompt_field, completion_field)

    def _encode(self, files: list[Path], prompt_field: str, completion_field: str):
        input_ids, labels = [], []
        for path in files:
            fix = (
                f"each line must be one object with {prompt_field!r} and {completion_field!r}; fix or delete that line"
            )
            for line_number, record in json_lines(path, fix):  # streamed: bounded memory, a huge line refused
                where = f"{path}:{line_number}"
                if not isinstance(record, dict) or prompt_field not in record or completion_field not in record:
                    raise ValueError(
                        f"{where}: expected fields {prompt_field!r} and {completion_field!r} (set prompt_field / "
                        "completion_field if the file names them otherwise)"
                    )
                if not all(isinstance(record[k], str) for k in (prompt_field, completion_field)):
                    raise ValueError(f"{where}: {prompt_field!r} and {completion_field!r} must be strings")
                prompt = self.tokenizer(record[prompt_field], add_special_tokens=False)["input_ids"]
                answer = self.tokenizer(record[completion_field], add_special_tokens=False)["input_ids"]
                ids = prompt + answer + [self.eos_token_id]
                if len(ids) > self.seq_len:
                    raise ValueError(f"{where} has {len(ids)} tokens, more than seq_len={self.seq_len}: raise seq_len")
                padding = self.seq_len - len(ids)
                input_ids.append(ids + [self.pad_token_id] * padding)
                labels.append([IGNORE_INDEX] * len(prompt) + answer + [self.eos_token_id] + [IGNORE_INDEX] * padding)
        if not input_ids:
            raise ValueError(
                f"no prompt/completion examples in {[str(f) for f in files]} (empty or blank): add lines such as "
                f'{{"{prompt_field}": "...", "{completion_field}": "..."}}'
            )
        return np.asarray(input_ids, dtype=np.int64), np.asarray(labels, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.input_ids)

    def _sequence(self, index: int) -> torch.Tensor:
        return torch.from_numpy(self.input_ids[index])

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        item = super().__getitem__(index)
        item["labels"] = torch.from_numpy(self.labels[int(index) % len(self)])
        return item
