"""Plain text: packed sequences equal the hand-computed tokens; formats, caching, pickling, bad input."""

import json
import pickle
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from repo_train.byte_tokenizer import BYTE_VOCAB_SIZE, byte_tokenizer
from repo_train.data import DataSource, TextData, TextDataset
from repo_train.data.text import load_tokenizer

VOCAB = {
    "[PAD]": 0,
    "[UNK]": 1,
    "[EOS]": 2,
    "the": 3,
    "cat": 4,
    "sat": 5,
    "on": 6,
    "mat": 7,
    "a": 8,
    "dog": 9,
    "ran": 10,
}
DOCS = ["the cat sat", "", "a dog ran on the mat", "the dog"]
# Each non-empty document, then EOS (2), all concatenated:
STREAM = [3, 4, 5, 2] + [8, 9, 10, 6, 3, 7, 2] + [3, 9, 2]


@pytest.fixture(scope="module")
def tokenizer():
    """A word-level tokenizer with known ids, built offline."""
    backend = Tokenizer(models.WordLevel(VOCAB, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="[EOS]", unk_token="[UNK]", pad_token="[PAD]")


@pytest.fixture
def jsonl(tmp_path):
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps({"text": doc, "id": i}) + "\n" for i, doc in enumerate(DOCS)))
    return path


def _rows(dataset):
    return [dataset[i]["input_ids"].tolist() for i in range(len(dataset))]


def test_jsonl_is_tokenised_with_eos_concatenated_and_cut(tokenizer, jsonl, tmp_path):
    dataset = TextDataset([jsonl], tokenizer=tokenizer, seq_len=4, cache_dir=tmp_path / "hf")
    assert dataset.num_tokens == 14 and len(dataset) == 3
    assert _rows(dataset) == [STREAM[0:4], STREAM[4:8], STREAM[8:12]]  # tail [9, 2] dropped
    assert dataset[0]["input_ids"].dtype == torch.long
    assert (dataset.eos_token_id, dataset.pad_token_id, dataset.vocab_size) == (2, 0, 11)
    five = TextDataset([jsonl], tokenizer=tokenizer, seq_len=5, cache_dir=tmp_path / "hf")
    assert _rows(five) == [STREAM[0:5], STREAM[5:10]]


def test_txt_lines_parquet_and_custom_field_give_the_same_stream(tokenizer, tmp_path):
    txt = tmp_path / "docs.txt"
    txt.write_text("\n".join(DOCS) + "\n")
    parquet = tmp_path / "docs.parquet"
    pq.write_table(pa.table({"body": DOCS}), parquet)
    cache = tmp_path / "hf"
    from_txt = TextDataset([txt], tokenizer=tokenizer, seq_len=7, cache_dir=cache)
    from_parquet = TextDataset([parquet], tokenizer=tokenizer, seq_len=7, text_field="body", cache_dir=cache)
    assert _rows(from_txt) == _rows(from_parquet) == [STREAM[0:7], STREAM[7:14]]


def test_tokenizer_from_a_local_directory_and_the_config(tokenizer, jsonl, tmp_path):
    tokenizer.save_pretrained(tmp_path / "tok")
    config = TextData(tokenizer=str(tmp_path / "tok"), paths=[str(jsonl)], seq_len=6, cache_dir=str(tmp_path / "hf"))
    dataset = config.build()
    assert _rows(dataset) == [STREAM[0:6], STREAM[6:12]]
    same = TextData(paths=[str(jsonl)], seq_len=6, cache_dir=str(tmp_path / "hf")).build(tokenizer=tokenizer)
    assert _rows(same) == _rows(dataset)


def test_tokenisation_is_cached_and_the_dataset_pickles(tokenizer, jsonl, tmp_path):
    first = TextDataset([jsonl], tokenizer=tokenizer, seq_len=4, cache_dir=tmp_path / "hf")
    second = TextDataset([jsonl], tokenizer=tokenizer, seq_len=3, cache_dir=tmp_path / "hf")
    files = [f["filename"] for f in first.tokenized.cache_files]
    assert files and files == [f["filename"] for f in second.tokenized.cache_files]
    clone = pickle.loads(pickle.dumps(first))
    assert _rows(clone) == _rows(first)


def test_many_chunks_are_stitched_across_boundaries(tokenizer, tmp_path):
    path = tmp_path / "many.jsonl"
    path.write_text("".join(json.dumps({"text": "the cat sat on the mat"}) + "\n" for _ in range(2500)))
    dataset = TextDataset([path], tokenizer=tokenizer, seq_len=9, cache_dir=tmp_path / "hf")
    stream = [3, 4, 5, 6, 3, 7, 2] * 2500
    assert len(dataset.chunks) == 3  # Arrow record batches of 1000 documents
    assert len(dataset) == len(stream) // 9
    assert _rows(dataset) == [stream[9 * i : 9 * i + 9] for i in range(len(stream) // 9)]
    assert dataset.tokens(6990, 7010).tolist() == stream[6990:7010]  # crosses the first boundary


def test_bad_inputs_are_explained(tokenizer, jsonl, tmp_path):
    cache = tmp_path / "hf"
    with pytest.raises(ValueError, match=r"no field 'body'; its fields are \['text', 'id'\]"):
        TextDataset([jsonl], tokenizer=tokenizer, seq_len=4, text_field="body", cache_dir=cache)
    with pytest.raises(ValueError, match="holds .*int64.* not text"):
        TextDataset([jsonl], tokenizer=tokenizer, seq_len=4, text_field="id", cache_dir=cache)
    with pytest.raises(ValueError, match="has 14 tokens .* fewer than seq_len=15"):
        TextDataset([jsonl], tokenizer=tokenizer, seq_len=15, cache_dir=cache)
    with pytest.raises(ValueError, match="tokenizer has ids up to 10 but vocab_size=8"):
        TextDataset([jsonl], tokenizer=tokenizer, seq_len=4, vocab_size=8, cache_dir=cache)
    with pytest.raises(FileNotFoundError, match="matched no text files"):
        TextDataset([str(tmp_path / "*.txt")], tokenizer=tokenizer, seq_len=4, cache_dir=cache)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        TextDataset([tmp_path / "gone.jsonl"], tokenizer=tokenizer, seq_len=4, cache_dir=cache)
    (tmp_path / "notes.md").write_text("the cat\n")
    with pytest.raises(ValueError, match=r"cannot read \['.md'\]"):
        TextDataset([tmp_path / "notes.md"], tokenizer=tokenizer, seq_len=4, cache_dir=cache)
    (tmp_path / "b.txt").write_text("the cat\n")
    with pytest.raises(ValueError, match="mix formats"):
        TextDataset([jsonl, tmp_path / "b.txt"], tokenizer=tokenizer, seq_len=4, cache_dir=cache)
    with pytest.raises(ValueError, match="exactly one of 'paths'"):
        TextDataset([], tokenizer=tokenizer, seq_len=4, cache_dir=cache)
    with pytest.raises(ValueError, match="seq_len must be an integer >= 2"):
        TextDataset([jsonl], tokenizer=tokenizer, seq_len=1, cache_dir=cache)
    with pytest.raises(ValueError, match="could not load the tokenizer"):
        TextDataset([jsonl], tokenizer=str(tmp_path / "no_tokenizer_here"), seq_len=4, cache_dir=cache)
    with pytest.raises(ValueError, match="needs a tokenizer"):
        TextData(paths=[str(jsonl)]).build()
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"text": "the cat"\n')
    with pytest.raises(ValueError, match="could not read 1 json file"):
        TextDataset([broken], tokenizer=tokenizer, seq_len=2, cache_dir=cache)


def test_byte_names_the_built_in_tokenizer(tmp_path, monkeypatch):
    """`tokenizer: byte` needs no files; a directory called byte is a path object (or ./byte), not the name."""
    loaded = load_tokenizer("byte")
    assert len(loaded) == BYTE_VOCAB_SIZE and (loaded.pad_token_id, loaded.eos_token_id) == (0, 1)
    assert loaded("kv: a=b")["input_ids"] == byte_tokenizer()("kv: a=b")["input_ids"] == [b + 2 for b in b"kv: a=b"]
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="could not load the tokenizer .byte.: no such directory"):
        load_tokenizer(Path("byte"))
    (tmp_path / "docs.txt").write_text("copy: a b | a b\nreverse: a b | b a\n")
    text = DataSource.from_config(
        {
            "class_path": "TextData",
            "init_args": {"tokenizer": "byte", "paths": ["docs.txt"], "seq_len": 8, "cache_dir": "cache"},
        }
    ).build()
    assert text.vocab_size == BYTE_VOCAB_SIZE and text[0]["input_ids"].tolist() == [b + 2 for b in b"copy: a "]
