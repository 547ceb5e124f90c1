"""Scale file: round trip, atomic write, and one clear error per broken field."""

import copy
import json

import pytest
from transformers import LlamaConfig

from search.fitness import FitnessResult, SubsetWeights
from search.ga import GAConfig
from search.genome import CurveGenome, LayerGenome, SearchSpace
from search.scale_file_writer import (
    ScaleFile,
    ScaleFileError,
    config_sha256,
    load_scale_file,
    search_section,
    write_scale_file,
)

SPACE = SearchSpace(8, num_points=3)
GENOME = CurveGenome((0, 3, 7), (12, 19, 14))
FITNESS = FitnessResult(0.61, {"begin": 0.7, "middle": 0.5, "end": 0.64})
MODEL = {"name": "tiny-llama", "config_sha256": config_sha256({"num_hidden_layers": 8})}
SEARCH = search_section(GAConfig(seed=3), SubsetWeights(), "ab" * 32, generations=20, wall_time_s=12.5)


def _valid() -> dict:
    return ScaleFile.from_genome(SPACE, GENOME, FITNESS, MODEL, SEARCH).to_json()


def test_round_trip(tmp_path):
    scale_file = ScaleFile.from_genome(SPACE, GENOME, FITNESS, MODEL, SEARCH)
    path = write_scale_file(tmp_path / "sub" / "scales.json", scale_file)
    loaded = load_scale_file(path, expected_num_layers=8)
    assert loaded == scale_file
    assert loaded.scales == SPACE.scales(GENOME) and loaded.control_points == [[0, 1.2], [3, 1.9], [7, 1.4]]
    assert loaded.curve == {"type": "bezier", "degree": 2} and loaded.search["seed"] == 3
    assert loaded.search["weights"] == {"begin": 0.2, "middle": 0.3, "end": 0.5}
    assert [p.name for p in path.parent.iterdir()] == ["scales.json"]  # no temporary file left behind


def test_brute_force_file_has_no_curve(tmp_path):
    space = SearchSpace(4, curve="none")
    scale_file = ScaleFile.from_genome(space, LayerGenome((10, 13, 20, 11)), FITNESS, MODEL, SEARCH)
    loaded = load_scale_file(write_scale_file(tmp_path / "s.json", scale_file))
    assert loaded.curve == {"type": "none", "degree": None} and loaded.scales == [1.0, 1.3, 2.0, 1.1]


def _broken(edit):
    data = copy.deepcopy(_valid())
    edit(data)
    return data


CASES = [
    (lambda d: d.pop("format_version"), "lacks 'format_version'"),
    (lambda d: d.update(format_version=2), r"format_version 2 is not supported \(this code reads 1\)"),
    (lambda d: d.pop("fitness"), r"lacks \['fitness'\]"),
    (lambda d: d.update(num_layers=0), "num_layers must be a positive integer"),
    (lambda d: d.update(scales=d["scales"][:-1]), "has 7 scales but num_layers = 8"),
    (lambda d: d["scales"].__setitem__(2, -1.0), r"scales must lie within .* \[\(2, -1.0\)\]"),
    (lambda d: d["scales"].__setitem__(2, "x"), "scales must be a list of finite numbers"),
    (lambda d: d["scales"].__setitem__(2, 1.9), "scales differ from the bezier curve"),
    (lambda d: d.update(curve={"type": "spline", "degree": 2}), "unknown curve type 'spline'"),
    (lambda d: d.update(curve={"type": "bezier", "degree": 3}), "degree = points − 1"),
    (lambda d: d.update(curve="bezier"), "curve must be an object"),
    (lambda d: d["control_points"].__setitem__(1, [0, 1.9]), r"must increase strictly within \[0, 7\]"),
    (lambda d: d.update(control_points=[[0, 1.0]]), "needs 2–5 control points"),
    (lambda d: d.update(control_points=[0, 1]), r"list of \[x, y\] number pairs"),
    (lambda d: d.update(curve={"type": "none", "degree": None}), "takes no control points"),
    (lambda d: d["fitness"].pop("overall"), "fitness.overall must be a finite number"),
    (lambda d: d["fitness"].update(per_subset={"begin": None}), "fitness.per_subset"),
    (lambda d: d["model"].update(name=""), "model.name"),
    (lambda d: d["model"].update(config_sha256="abc"), "64 lowercase hex digits"),
    (lambda d: d["search"].pop("data_sha256"), r"search lacks \['data_sha256'\]"),
]


@pytest.mark.parametrize(("edit", "message"), CASES)
def test_every_broken_field_is_named(tmp_path, edit, message):
    path = tmp_path / "s.json"
    path.write_text(json.dumps(_broken(edit)))
    with pytest.raises(ScaleFileError, match=message) as info:
        load_scale_file(path)
    assert str(path) in str(info.value) and ";" in str(info.value)  # names the file, then the fix


def test_layer_count_mismatch_with_the_model(tmp_path):
    path = write_scale_file(tmp_path / "s.json", ScaleFile.from_genome(SPACE, GENOME, FITNESS, MODEL, SEARCH))
    with pytest.raises(ScaleFileError, match="has 8 layers, model has 28: run the search for this model"):
        load_scale_file(path, expected_num_layers=28)


def test_unreadable_files(tmp_path):
    with pytest.raises(ScaleFileError, match="no scale file at"):
        load_scale_file(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ScaleFileError, match="is not valid JSON"):
        load_scale_file(tmp_path / "bad.json")
    (tmp_path / "list.json").write_text("[]")
    with pytest.raises(ScaleFileError, match="top level must be a JSON object"):
        load_scale_file(tmp_path / "list.json")


def test_writing_an_invalid_file_fails_and_writes_nothing(tmp_path):
    scale_file = ScaleFile.from_genome(SPACE, GENOME, FITNESS, MODEL, SEARCH)
    scale_file.scales = scale_file.scales[:3]
    with pytest.raises(ScaleFileError, match="has 3 scales"):
        write_scale_file(tmp_path / "s.json", scale_file)
    assert not list(tmp_path.iterdir())


def test_config_sha256_is_stable_across_forms(tmp_path):
    config = LlamaConfig(num_hidden_layers=2, hidden_size=32, intermediate_size=64, num_attention_heads=4)
    digest = config_sha256(config)
    (tmp_path / "config.json").write_text(json.dumps(config.to_dict()))
    assert config_sha256(tmp_path) == config_sha256(tmp_path / "config.json") == digest
    assert len(digest) == 64 and digest != config_sha256(LlamaConfig(num_hidden_layers=3))
