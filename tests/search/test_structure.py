"""Structure deviation D (our operationalisation; search/structure.py), the Figure-3 variants, `search diagnose`."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from float_checks import assert_close_to_scale

from evaluation.model_loading import tiny_default
from repo_train.modeling.scaling import ScaledRopePolicy
from repo_train.modeling.swapping import current_policies
from search.cli import main
from search.fitness import FitnessResult, SubsetWeights
from search.ga import GAConfig
from search.genome import LayerGenome, SearchSpace
from search.policy import scaled_model
from search.scale_file_writer import ScaleFile, config_sha256, search_section, write_scale_file
from search.structure import VARIANTS, scaling_variants, structure_deviations, validate_structure

TINY = str(Path(__file__).resolve().parents[2] / "configs" / "search" / "tiny.yaml")
SCALES = [1.0, 1.3, 2.0, 1.1]


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def tiny():
    return tiny_default(seed=0)


def _tokens(lengths, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(2, 258, (n,), generator=generator) for n in lengths]


def _left_padded(sequences):
    width = max(len(s) for s in sequences)
    ids = torch.zeros(len(sequences), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, seq in enumerate(sequences):
        ids[row, width - len(seq) :] = seq
        mask[row, width - len(seq) :] = 1
    return ids, mask


def structure_deviation(model, batches, scales):
    """D of one scale vector: the one-variant case of `structure_deviations`."""
    return structure_deviations(model, batches, {"scales": scales})["scales"]


def _one_by_one(sequences):
    return [(seq[None], torch.ones(1, len(seq), dtype=torch.long)) for seq in sequences]


def test_all_ones_gives_zero(tiny):
    model, _ = tiny
    result = structure_deviation(model, [_left_padded(_tokens([40, 25]))], [1.0] * 4)
    assert len(result.per_layer) == 4
    assert max(result.per_layer) < 1e-6 and result.mean < 1e-6


def test_matches_a_reference_written_out(tiny):
    """numpy: cosine matrices of the CausalLM's hidden states (entries 1..L) with and without the scales."""
    model, _ = tiny
    sequences = _tokens([30, 17], seed=3)

    def states(scales, seq):
        with scaled_model(model, scales), torch.no_grad():
            out = model(seq[None], output_hidden_states=True)
        return [h[0].double().numpy() for h in out.hidden_states[1:]]

    def cosine(h):
        n = h / np.linalg.norm(h, axis=-1, keepdims=True)
        return n @ n.T

    expected = np.zeros(4)
    for seq in sequences:
        base, scaled = states([1.0] * 4, seq), states(SCALES, seq)
        expected += [np.linalg.norm(cosine(s) - cosine(b)) / np.linalg.norm(cosine(b)) for b, s in zip(base, scaled)]
    expected /= len(sequences)
    result = structure_deviation(model, _one_by_one(sequences), SCALES)
    # D is a ratio of norms (dimensionless); its float32 error is relative to the largest D, not to each one
    assert_close_to_scale(result.per_layer, expected, 1e-5, what="D per layer")
    assert_close_to_scale(result.mean, expected.mean(), 1e-5, scale=max(expected), what="mean D")
    assert min(result.per_layer[1:]) > 1e-3  # layers 1.. are scaled: a real deviation


def test_layers_before_the_first_scaled_layer_do_not_move(tiny):
    """Causality over depth: scaling layer k cannot change the outputs of layers < k."""
    model, _ = tiny
    batches = [_left_padded(_tokens([48, 33], seed=1))]
    for k in (1, 2, 3):
        scales = [1.0] * 4
        scales[k] = 1.7
        per_layer = structure_deviation(model, batches, scales).per_layer
        assert all(d < 1e-7 for d in per_layer[:k]), (k, per_layer)
        assert all(d > 1e-3 for d in per_layer[k:]), (k, per_layer)


def test_mean_deviation_grows_with_a_uniform_scale(tiny):
    """On this model D(1.0) = 0 < D(1.2) < D(2.0) holds for the mean D.

    Per layer it need not: a random model's later layers can react slightly
    less to 2.0 than to 1.5 (seen on 16-token inputs), since RoPE rotations
    are not a monotone function of the scale; so only the mean is asserted.
    """
    model, _ = tiny
    batches = [_left_padded(_tokens([48, 48], seed=2))]
    variants = {f"{s}": [s] * 4 for s in (1.0, 1.2, 2.0)}
    means = [r.mean for r in structure_deviations(model, batches, variants).values()]
    assert means[0] < 1e-6 and means[0] < means[1] < means[2], means
    assert means[2] > means[1] + 1e-3


def test_padding_does_not_change_d(tiny):
    model, _ = tiny
    sequences = _tokens([40, 23, 7], seed=4)
    variants = {"a": SCALES, "b": [2.0] * 4}
    batched = structure_deviations(model, [_left_padded(sequences)], variants)
    alone = structure_deviations(model, _one_by_one(sequences), variants)
    split = structure_deviations(model, [_left_padded(sequences[:2]), _left_padded(sequences[2:])], variants)
    for name in variants:  # padded and unpadded forwards are different float paths
        scale = max(alone[name].per_layer)
        assert_close_to_scale(batched[name].per_layer, alone[name].per_layer, 1e-5, what=f"D of {name}, batched")
        assert_close_to_scale(split[name].per_layer, alone[name].per_layer, 1e-5, what=f"D of {name}, split")
        assert_close_to_scale(batched[name].mean, alone[name].mean, 1e-5, scale=scale, what=f"mean D of {name}")


def test_model_is_restored_and_mistakes_are_clear(tiny):
    model, _ = tiny
    before = [type(p) for p in current_policies(model)]
    batches = [_left_padded(_tokens([12]))]
    structure_deviation(model, batches, SCALES)
    assert [type(p) for p in current_policies(model)] == before
    assert ScaledRopePolicy not in before
    with pytest.raises(ValueError, match="got 3 scales for a model with 4 layers"):
        structure_deviation(model, batches, [1.0, 1.5, 2.0])
    with pytest.raises(ValueError, match="at least one scale vector"):
        structure_deviations(model, batches, {})
    with pytest.raises(ValueError, match="no examples"):
        structure_deviation(model, [], SCALES)
    ids, mask = _left_padded(_tokens([5, 3]))
    with pytest.raises(ValueError, match="at least one real token"):
        structure_deviation(model, [(ids, torch.zeros_like(mask))], SCALES)


def test_variants():
    scales = [1.0, 1.2, 1.5, 1.9, 2.0, 1.7, 1.4, 1.05]
    variants = scaling_variants(scales, np.random.default_rng(0))
    assert list(variants) == list(VARIANTS)
    assert all(len(v) == len(scales) and all(isinstance(s, float) for s in v) for v in variants.values())
    assert variants["searched"] == scales
    assert len(set(variants["uniform"])) == 1 and variants["uniform"][0] == pytest.approx(np.mean(scales))
    assert sorted(variants["shuffled"]) == sorted(scales) and variants["shuffled"] != scales
    noise = np.subtract(variants["noisy"], scales)
    assert np.all(np.abs(noise) <= 0.1) and min(variants["noisy"]) >= 1.0 and np.any(noise != 0)
    assert all(1.0 <= s <= 2.0 for s in variants["random"]) and len(set(variants["random"])) == len(scales)
    assert scaling_variants(scales, np.random.default_rng(0)) == variants
    other = scaling_variants(scales, np.random.default_rng(1))
    assert all(other[name] != variants[name] for name in ("noisy", "shuffled", "random"))
    assert other["searched"] == variants["searched"] and other["uniform"] == variants["uniform"]
    assert min(scaling_variants([0.5] * 3, np.random.default_rng(0))["noisy"]) == 1.0  # floored at 1.0
    with pytest.raises(ValueError, match="finite scales > 0"):
        scaling_variants([1.0, 0.0], np.random.default_rng(0))


def _scale_file(path: Path, tenths) -> Path:
    space = SearchSpace(len(tenths), curve="none")
    fitness = FitnessResult(0.0, {"begin": 0.0, "middle": 0.0, "end": 0.0})
    model = {"name": "hand-made", "config_sha256": config_sha256({"num_hidden_layers": len(tenths)})}
    search = search_section(GAConfig(), SubsetWeights(), "ab" * 32, generations=0, wall_time_s=0.0)
    return write_scale_file(path, ScaleFile.from_genome(space, LayerGenome(tuple(tenths)), fitness, model, search))


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory, tiny):
    model, tokenizer = tiny
    path = tmp_path_factory.mktemp("tiny-model")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def test_cli_end_to_end(tmp_path, tiny_dir, capsys):
    scale_file = _scale_file(tmp_path / "scales.json", (10, 13, 20, 11))
    out = tmp_path / "diag"
    argv = ["diagnose", "--model.path", str(tiny_dir), "--config", TINY, "--scale_file", str(scale_file)]
    assert main([*argv, "--out", str(out), "--variant_seed", "3"]) == 0
    printed = capsys.readouterr().out
    print(printed)  # the D of every variant, shown by `pytest -rP`
    data = json.loads((out / "structure.json").read_text())
    validate_structure(data)
    assert data["num_layers"] == 4 and data["seed"] == 3 and data["task"]["rows"] == 12
    assert data["variants"]["searched"]["scales"] == [1.0, 1.3, 2.0, 1.1]
    assert data["variants"]["random"]["scales"] == scaling_variants(SCALES, np.random.default_rng(3))["random"]
    searched = data["variants"]["searched"]
    assert searched["D_per_layer"][0] < 1e-7 and min(searched["D_per_layer"][1:]) > 1e-3  # layer 0 is unscaled
    assert data["variants"]["uniform"]["S"] == 0.0 and searched["S"] > 0
    assert all(entry["D"] > 1e-3 for entry in data["variants"].values())
    assert (out / "structure.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in out.iterdir()) == ["structure.json", "structure.png"]  # no temporary files
    for name in VARIANTS:
        assert f"{name:9s} D {data['variants'][name]['D']:.6f}" in printed


@pytest.mark.parametrize(
    ("layers", "extra", "message"),
    [
        (8, [], "has 8 layers, model has 4: run the search for this model"),
        (4, ["--model.path", "/no/such/model"], "model directory '/no/such/model': no such directory"),
        (None, [], "no scale file at"),
        (4, ["--out-is-a-file"], "is a file, not a directory"),
    ],
)
def test_cli_mistakes_are_one_line_and_exit_2(tmp_path, tiny_dir, capsys, layers, extra, message):
    scale_file = tmp_path / "scales.json"
    if layers is not None:
        _scale_file(scale_file, (12,) * layers)
    out = tmp_path / "diag"
    if extra == ["--out-is-a-file"]:
        out.write_text("")
        extra = []
    model = [] if "--model.path" in extra else ["--model.path", str(tiny_dir)]
    argv = ["diagnose", *model, *extra, "--config", TINY, "--scale_file", str(scale_file), "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "diag" / "structure.json").exists()
