"""Training data: fixed-length token sequences for next-token prediction.

The sources share one contract (`TokenSequenceDataset`): a map-style
dataset where sample i is always the same `{"input_ids": LongTensor[seq_len]}`,
an epoch order that depends only on (seed, epoch), and `ResumableSampler`,
which turns "samples consumed so far" into the next indices of each rank.
Because nothing else holds state, resuming a run is just restoring one number.

The contract and its helpers live in `base.py`; this module only re-exports the
public names, among them the typed sources a training config names by
`class_path: repo_train.data.<Name>` (`DataSource` and its subclasses, config.py).
"""

from __future__ import annotations

from repo_train.data.base import (
    ResumableSampler,
    TokenSequenceDataset,
    check_seed,
    check_seq_len,
    epoch_order,
    expand_paths,
)
from repo_train.data.config import (
    BUILT_IN_SOURCES,
    DATA_SOURCES,
    DataSource,
    OlmoNumpyData,
    PromptCompletionData,
    SyntheticData,
    SyntheticTextData,
    TextData,
    legacy_source_message,
    register_data_source,
    saved_source_options,
    source_class,
)
from repo_train.data.olmo_numpy import (
    DOLMA2_EOS_TOKEN_ID,
    DOLMA2_PAD_TOKEN_ID,
    DOLMA2_PADDED_VOCAB_SIZE,
    DOLMA2_VOCAB_SIZE,
    OlmoNumpyDataset,
    dtype_for_vocab,
    read_mix_file,
)
from repo_train.data.synthetic import SyntheticDataset
from repo_train.data.synthetic_text import SyntheticTextDataset
from repo_train.data.text import TextDataset, load_tokenizer

__all__ = [
    "BUILT_IN_SOURCES",
    "DATA_SOURCES",
    "DOLMA2_EOS_TOKEN_ID",
    "DOLMA2_PADDED_VOCAB_SIZE",
    "DOLMA2_PAD_TOKEN_ID",
    "DOLMA2_VOCAB_SIZE",
    "DataSource",
    "OlmoNumpyData",
    "OlmoNumpyDataset",
    "PromptCompletionData",
    "ResumableSampler",
    "SyntheticData",
    "SyntheticDataset",
    "SyntheticTextData",
    "SyntheticTextDataset",
    "TextData",
    "TextDataset",
    "TokenSequenceDataset",
    "check_seed",
    "check_seq_len",
    "dtype_for_vocab",
    "epoch_order",
    "expand_paths",
    "legacy_source_message",
    "load_tokenizer",
    "read_mix_file",
    "register_data_source",
    "saved_source_options",
    "source_class",
]
