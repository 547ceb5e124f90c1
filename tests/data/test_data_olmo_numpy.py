"""OLMo numpy shards: exact windows per file, mix files, dtype, order, resume, cached id scan, bad input."""

import json

import numpy as np
import pytest
import torch
from olmo_core.data import TokenizerConfig
from tokenizers import Tokenizer, models
from transformers import PreTrainedTokenizerFast

from repo_train.data import OlmoNumpyData, OlmoNumpyDataset, dtype_for_vocab, olmo_numpy, read_mix_file

EOS = 100257
SMALL = {"vocab_size": 1000, "eos_token_id": 999, "pad_token_id": 998}


def _write(path, tokens, dtype=np.uint32):
    """A shard as the Dolma toolkit writes it: raw token ids, no header."""
    np.asarray(tokens, dtype=dtype).tofile(path)
    return path


@pytest.fixture
def shards(tmp_path):
    a = np.arange(100, dtype=np.uint32) + 1000
    a[[9, 40, 77]] = EOS  # three documents end inside the file
    b = np.arange(50, dtype=np.uint32) + 5000
    data = tmp_path / "data"
    data.mkdir()
    return {
        "a": (_write(data / "part-000-00000.npy", a), a),
        "b": (_write(data / "part-001-00000.npy", b), b),
        "cache": tmp_path / "cache",
    }


def _dataset(shards, **kwargs):
    kwargs.setdefault("seq_len", 16)
    kwargs.setdefault("cache_dir", shards["cache"])
    paths = kwargs.pop("paths", [shards["a"][0], shards["b"][0]])
    return OlmoNumpyDataset(paths, **kwargs)


def test_dolma2_defaults_come_from_olmo_core():
    dolma2 = TokenizerConfig.dolma2()
    config = OlmoNumpyData()
    assert (config.vocab_size, config.eos_token_id, config.pad_token_id) == (100278, 100257, 100277)
    assert (dolma2.vocab_size, dolma2.eos_token_id, dolma2.pad_token_id) == (100278, 100257, 100277)
    assert olmo_numpy.DOLMA2_PADDED_VOCAB_SIZE == dolma2.padded_vocab_size(128) == 100352 and config.seq_len == 4096
    assert (olmo_numpy.DOLMA2_VOCAB_SIZE, olmo_numpy.DOLMA2_EOS_TOKEN_ID, olmo_numpy.DOLMA2_PAD_TOKEN_ID) == (
        dolma2.vocab_size, dolma2.eos_token_id, dolma2.pad_token_id
    )  # fmt: skip
    assert dtype_for_vocab(100278) == np.uint32
    assert dtype_for_vocab(50280) == np.uint16 and dtype_for_vocab(65536) == np.uint16


def test_instances_are_consecutive_windows_per_file_and_tails_dropped(shards):
    dataset = _dataset(shards)
    (path_a, a), (path_b, b) = shards["a"], shards["b"]
    assert len(dataset) == 9 and dataset.instances_per_file() == [6, 3]  # 100 // 16, 50 // 16
    for i in range(6):
        assert torch.equal(dataset[i]["input_ids"], torch.from_numpy(a[16 * i : 16 * i + 16].astype(np.int64)))
    for j in range(3):
        assert torch.equal(dataset[6 + j]["input_ids"], torch.from_numpy(b[16 * j : 16 * j + 16].astype(np.int64)))
    assert dataset[0]["input_ids"].dtype == torch.long and dataset[0]["input_ids"][9] == EOS
    assert dataset.locate(7) == (path_b, 16) and dataset.locate(5) == (path_a, 80)
    assert dataset.padded_vocab_size == 100352


def test_mix_file_globs_and_explicit_paths_agree(shards, tmp_path):
    mix = tmp_path / "mix.txt"
    mix.write_text("# stage-2 shards\n\ndata/part-000-00000.npy\n  # another comment\ndata/part-001-*.npy\n")
    assert read_mix_file(mix) == [shards["a"][0].resolve(), shards["b"][0].resolve()]
    from_mix = _dataset(shards, paths=[], mix_file=mix)
    from_glob = _dataset(shards, paths=[str(tmp_path / "data" / "*.npy")])
    explicit = _dataset(shards)
    for i in range(9):
        assert torch.equal(from_mix[i]["input_ids"], explicit[i]["input_ids"])
        assert torch.equal(from_glob[i]["input_ids"], explicit[i]["input_ids"])


def test_uint16_shards_of_an_older_tokenizer(tmp_path):
    tokens = np.arange(40) + 60000
    path = _write(tmp_path / "neox.npy", tokens, dtype=np.uint16)
    dataset = OlmoNumpyDataset([path], seq_len=10, vocab_size=65000, eos_token_id=0, pad_token_id=1, cache_dir=tmp_path)
    assert dataset.dtype == np.uint16 and len(dataset) == 4
    assert dataset[3]["input_ids"].tolist() == list(range(60030, 60040))


def test_order_is_seeded_and_resume_continues_it(shards):
    dataset = _dataset(shards, seed=11)
    same = _dataset(shards, seed=11)
    np.testing.assert_array_equal(dataset.order(0), same.order(0))
    assert sorted(dataset.order(0).tolist()) == list(range(9))
    assert not np.array_equal(dataset.order(0), _dataset(shards, seed=12).order(0))
    sampler = dataset.sampler()
    full = list(sampler) + list(sampler)
    interrupted = dataset.sampler()
    stream = iter(interrupted)
    head = [next(stream) for _ in range(4)]
    resumed = dataset.sampler()
    resumed.load_state_dict(interrupted.state_dict())
    assert head + list(resumed) + list(resumed) == full


def test_max_token_id_is_scanned_once_and_cached(shards, monkeypatch):
    _dataset(shards)
    cache_file = shards["cache"] / "max_token_ids.json"
    assert cache_file.is_file() and sorted(json.loads(cache_file.read_text()).values()) == [5049, EOS]

    def no_rescan(*args):
        raise AssertionError("rescanned a cached shard")

    monkeypatch.setattr(olmo_numpy, "_scan_max", no_rescan)
    assert len(_dataset(shards)) == 9


def test_token_id_beyond_vocab_names_file_position_and_id(tmp_path):
    tokens = np.full(64, 5, dtype=np.uint32)
    tokens[37] = 1234
    path = _write(tmp_path / "bad.npy", tokens)
    with pytest.raises(ValueError, match=r"bad\.npy.*token id 1234 \(at token 37\) >= vocab_size=1000"):
        OlmoNumpyDataset([path], seq_len=8, dtype="uint32", cache_dir=tmp_path, **SMALL)
    # a uint16 file read as uint32 shows up the same way
    path16 = _write(tmp_path / "small.npy", np.full(64, 7), dtype=np.uint16)
    with pytest.raises(ValueError, match="wrong dtype"):
        OlmoNumpyDataset([path16], seq_len=8, dtype="uint32", cache_dir=tmp_path, **SMALL)


def test_shards_are_checked_against_a_given_tokenizer(tmp_path):
    backend = Tokenizer(models.WordLevel({"[PAD]": 0, "[EOS]": 1, "a": 2, "b": 3}, unk_token="[PAD]"))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="[EOS]", pad_token="[PAD]")
    path = _write(tmp_path / "ab.npy", [2, 3, 1, 3, 2, 1, 2, 2])
    common = {"seq_len": 4, "pad_token_id": 0, "tokenizer": tokenizer, "dtype": "uint32", "cache_dir": tmp_path}
    ok = OlmoNumpyDataset([path], vocab_size=4, eos_token_id=1, **common)
    assert ok[1]["input_ids"].tolist() == [2, 1, 2, 2]
    with pytest.raises(ValueError, match="tokenizer has ids 0..3 but vocab_size=5.*set vocab_size=4"):
        OlmoNumpyDataset([path], vocab_size=5, eos_token_id=1, **common)
    with pytest.raises(ValueError, match="tokenizer's EOS id is 1 but eos_token_id=2"):
        OlmoNumpyDataset([path], vocab_size=4, eos_token_id=2, **common)


def test_bad_inputs_are_explained(shards, tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.npy' does not exist"):
        _dataset(shards, paths=[tmp_path / "missing.npy"])
    with pytest.raises(FileNotFoundError, match="matched no shard files"):
        _dataset(shards, paths=[str(tmp_path / "data" / "*.bin")])
    with pytest.raises(ValueError, match="no shards given"):
        _dataset(shards, paths=[])
    with pytest.raises(ValueError, match="is a directory"):
        _dataset(shards, paths=[tmp_path / "data"])
    with pytest.raises(ValueError, match="URL"):
        _dataset(shards, paths=["s3://bucket/part-0.npy"])
    empty_mix = tmp_path / "empty_mix.txt"
    empty_mix.write_text("# nothing yet\n")
    with pytest.raises(ValueError, match="lists no paths"):
        _dataset(shards, paths=[], mix_file=empty_mix)
    with pytest.raises(FileNotFoundError, match="mix file"):
        _dataset(shards, paths=[], mix_file=tmp_path / "nope.txt")
    (tmp_path / "empty.npy").touch()
    with pytest.raises(ValueError, match="is empty"):
        _dataset(shards, paths=[tmp_path / "empty.npy"])
    (tmp_path / "odd.npy").write_bytes(b"\x01\x02\x03\x04\x05\x06")
    with pytest.raises(ValueError, match="not a multiple of 4 .*set dtype"):
        _dataset(shards, paths=[tmp_path / "odd.npy"])
    np.save(tmp_path / "saved.npy", np.arange(64, dtype=np.uint32))
    with pytest.raises(ValueError, match=r"np\.save .*tofile"):
        _dataset(shards, paths=[tmp_path / "saved.npy"])
    with pytest.raises(ValueError, match="seq_len must be an integer >= 2"):
        _dataset(shards, seq_len=1)
    with pytest.raises(ValueError, match="fewer than seq_len=128"):
        _dataset(shards, seq_len=128)
    with pytest.raises(ValueError, match="uint16 cannot hold token ids up to 100277"):
        _dataset(shards, dtype="uint16")
    with pytest.raises(ValueError, match="dtype must be one of"):
        _dataset(shards, dtype="int32")
    with pytest.raises(ValueError, match="eos_token_id=100257 is outside"):
        _dataset(shards, vocab_size=1000)
