"""The synthetic corpus as text: every line reads back as the id episode it was written from, and the
sequences are those lines through the byte tokenizer (the tiny configs' data)."""

from itertools import islice

import numpy as np
import pytest
import torch

from repo_train.byte_tokenizer import BYTE_VOCAB_SIZE, byte_tokenizer
from repo_train.data import DataSource, SyntheticTextData, SyntheticTextDataset
from repo_train.data.synthetic import TASKS
from repo_train.data.synthetic_text import parse_episode, render_episode, word_index, word_text


def test_words_are_letters_and_read_back():
    assert [word_text(i) for i in (0, 1, 25, 26, 27, 51, 52, 701, 702)] == [
        "a", "b", "z", "aa", "ab", "az", "ba", "zz", "aaa",
    ]  # fmt: skip
    assert all(word_index(word_text(i)) == i for i in range(3000))
    for bad in ("", "A", "a b", "a1"):
        with pytest.raises(ValueError, match="is not a word"):
            word_index(bad)


def test_every_episode_line_reads_back_as_its_ids():
    dataset = SyntheticTextDataset(num_samples=40, seq_len=64, max_pairs=12, num_words=400)
    seen = set()
    for index in range(40):
        for task, tokens in islice(dataset.source.episode_stream(index), 6):
            line = render_episode(task, tokens)
            assert "\n" not in line and line.isascii()
            parsed_task, parsed = parse_episode(line)
            assert parsed_task == task and np.array_equal(parsed, tokens), line
            seen.add(task)
    assert seen == set(TASKS)
    copy = np.array([4, 17, 16, 18, 3, 17, 16, 18, 2])  # COPY b a c SEP b a c EOS
    assert render_episode("copy", copy) == "copy: b a c | b a c"
    kv = np.array([6, 19, 16, 17, 21, 7, 17, 21, 2])  # KV d=a b=f QUERY b=f EOS
    assert render_episode("kv", kv) == "kv: d=a b=f ? b=f"


@pytest.mark.parametrize(
    "line", ["copy a b | a b", "copy: a b a b", "kv: a=b c ? a=b", "kv: a=b c=d", "sort: a b", "repeat: a B"]
)
def test_a_line_of_another_shape_is_refused(line):
    with pytest.raises(ValueError):
        parse_episode(line)


def test_sequences_are_the_lines_through_the_byte_tokenizer():
    dataset = SyntheticTextData(num_samples=8, seq_len=96).build()
    assert (dataset.vocab_size, dataset.eos_token_id, dataset.pad_token_id) == (BYTE_VOCAB_SIZE, 1, 0)
    sample = dataset[3]["input_ids"]
    assert sample.shape == (96,) and sample.dtype == torch.long and int(sample.max()) < BYTE_VOCAB_SIZE
    assert torch.equal(sample, SyntheticTextData(num_samples=8, seq_len=96).build()[3]["input_ids"])
    byte = byte_tokenizer()
    lines = byte.decode(sample.tolist()).split("<eos>")
    assert len(lines) >= 2 and lines[: len(lines) - 1] == list(islice(dataset.lines(3), len(lines) - 1))
    for line in lines[:-1]:  # the last one is cut at seq_len
        parse_episode(line)
    assert sample[: len(byte(lines[0])["input_ids"])].tolist() == byte(lines[0])["input_ids"]


def test_the_source_round_trips_as_configuration_and_checks_its_options(tmp_path):
    source = SyntheticTextData(seq_len=32, num_words=100, seed=3)
    assert source.to_config()["class_path"] == "repo_train.data.SyntheticTextData"
    assert DataSource.from_config(source.to_config()) == source
    assert DataSource.from_config({"class_path": "SyntheticTextData", "init_args": {"seq_len": 32}}).tokenizer == "byte"
    with pytest.raises(ValueError, match="num_words must be >= 16"):
        SyntheticTextData(num_words=8).build()
    with pytest.raises(ValueError, match="ids up to 257 but vocab_size=200"):
        SyntheticTextData(vocab_size=200).build()
    with pytest.raises(ValueError, match="nowhere.: no such directory"):
        SyntheticTextData(tokenizer=str(tmp_path / "nowhere")).build()
