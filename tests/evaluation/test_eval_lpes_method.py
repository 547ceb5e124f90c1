"""`lpes:scale_file=PATH`: applies a searched scale file exactly as the search applied it; clear errors otherwise."""

from __future__ import annotations

import json

import pytest
import torch

from evaluation.generation import DecodeSettings, generate
from evaluation.methods import METHODS, MethodStack, build_method
from evaluation.methods.lpes import LayerScaledRope, read_scales
from evaluation.methods.lpes.scale_file_format import ScaleFileError
from evaluation.runner import RunConfig, run
from repo_train.modeling import layer_policies, record_positions
from search.fitness import FitnessResult, SubsetWeights
from search.ga import GAConfig
from search.genome import CurveGenome, SearchSpace
from search.policy import scaled_model
from search.scale_file_writer import ScaleFile, config_sha256, search_section, write_scale_file

PROMPTS = ["Key: 7f3a\nCorresponding value:", "The first prompt, a little longer than the others.", "third"]
SETTINGS = DecodeSettings(max_new_tokens=6, batch_size=3)


pytestmark = pytest.mark.usefixtures("one_thread")


def _scale_file(path, model, space: SearchSpace, genome) -> str:
    section = search_section(GAConfig(), SubsetWeights(), "ab" * 32, generations=1, wall_time_s=0.0)
    model_record = {"name": "tiny", "config_sha256": config_sha256(model.config)}
    fitness = FitnessResult(0.5, {"begin": 0.5, "middle": 0.5, "end": 0.5})
    write_scale_file(path, ScaleFile.from_genome(space, genome, fitness, model_record, section))
    return str(path)


@pytest.fixture
def searched(tmp_path, tiny_lm):
    """The tiny model and a 4-layer Bézier scale file (scales 1.2 … 1.9 … 1.4)."""
    model, _ = tiny_lm
    path = _scale_file(tmp_path / "s.json", model, SearchSpace(4, num_points=3), CurveGenome((0, 2, 3), (12, 19, 14)))
    return path, read_scales(path)[0]


def test_registered_and_spec_round_trip(searched):
    path, scales = searched
    method = build_method(f"lpes:scale_file={path}")
    assert METHODS["lpes"] is LayerScaledRope and isinstance(method, LayerScaledRope)
    assert method.scales == scales and len(set(scales)) > 1
    assert method.spec() == f"lpes:scale_file={path}"


def test_lpes_method_equals_applying_the_scales_directly(tiny_lm, searched):
    model, tokenizer = tiny_lm
    path, scales = searched
    ids = torch.randint(2, 200, (2, 40))
    with scaled_model(model, scales), torch.no_grad():
        direct_logits = model(ids).logits
        direct = generate(model, tokenizer, PROMPTS, SETTINGS)
    before = layer_policies(model)
    stack = MethodStack.parse(f"lpes:scale_file={path}")
    with stack.attached(model, tokenizer):  # what the runner does around generation
        with torch.no_grad():  # exact: the same scaled policies as scaled_model, so the same kernels in order
            assert torch.equal(model(ids).logits, direct_logits)
            with record_positions(model) as recorded:
                model(ids)
        via_method = generate(model, tokenizer, PROMPTS, SETTINGS, methods=stack)
    assert [o.token_ids for o in via_method] == [o.token_ids for o in direct]
    for positions, scale in zip(recorded.positions, scales):
        assert torch.equal(positions[0, 0], torch.arange(40.0) / scale)
    assert layer_policies(model) == before  # detached: the model is as it was


def test_uniform_scale_file_equals_pi_and_stacks_with_it(tiny_lm, tmp_path):
    model, tokenizer = tiny_lm
    flat = _scale_file(tmp_path / "flat.json", model, SearchSpace(4, num_points=3), CurveGenome((0, 2, 3), (17,) * 3))
    outputs = {}
    for spec in (f"lpes:scale_file={flat}", "pi:scale=1.7", "baseline"):
        stack = MethodStack.parse(spec)
        with stack.attached(model, tokenizer):
            outputs[spec.split(":")[0]] = [o.token_ids for o in generate(model, tokenizer, PROMPTS, SETTINGS, stack)]
    assert outputs["lpes"] == outputs["pi"] != outputs["baseline"]
    stack = MethodStack.parse(f"pi:scale=2+lpes:scale_file={flat}")
    with stack.attached(model, tokenizer), torch.no_grad(), record_positions(model) as recorded:
        model(torch.randint(2, 200, (1, 10)))
    assert torch.allclose(recorded.positions[0][0, 0], torch.arange(10.0) / 3.4)  # stacked scales multiply


def test_harness_runs_lpes_beside_baseline_and_pi(tiny_lm, searched, tmp_path):
    model, tokenizer = tiny_lm
    path, scales = searched
    methods = ["baseline", f"lpes:scale_file={path}", f"pi:scale={sum(scales) / len(scales)}"]
    tasks = {"kv": {"num_keys": 3, "num_examples": 1, "gold_positions": "all"}}
    config = RunConfig(out=str(tmp_path / "run"), tasks=tasks, methods=methods, max_new_tokens=2)
    config.bootstrap_resamples = 20
    summary = run(config, model=model, tokenizer=tokenizer, progress=False)
    assert set(summary["results"]["kv"]) == {MethodStack.parse(m).label for m in methods}


def test_scale_file_for_another_layer_count_is_a_clear_error(tiny_lm, tmp_path):
    model, tokenizer = tiny_lm
    eight = _scale_file(tmp_path / "eight.json", model, SearchSpace(8), SearchSpace(8).initial())
    stack = MethodStack.parse(f"lpes:scale_file={eight}")
    message = "has scales for 8 layers, the model has 4: use a scale file searched"
    with pytest.raises(ScaleFileError, match=message), stack.attached(model, tokenizer):
        pass
    assert all(type(p).__name__ == "RopePolicy" for p in layer_policies(model))  # nothing left installed


def _write(tmp_path, data) -> str:
    path = tmp_path / "bad.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(path)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no scale file at"),
        ("{oops", "is not valid JSON"),
        ({"scales": [1.0]}, "not an LPES scale file"),
        ({"format_version": 2, "num_layers": 1, "scales": [1.0]}, "format_version 2 is not supported"),
        ({"format_version": 1, "num_layers": 0, "scales": []}, "num_layers must be a positive integer"),
        ({"format_version": 1, "num_layers": 2, "scales": [1.0]}, "has 1 scales but num_layers = 2"),
        ({"format_version": 1, "num_layers": 2, "scales": [1.0, -1]}, r"scales must lie within .* \[\(1, -1\)\]"),
        ({"format_version": 1, "num_layers": 1, "scales": ["x"]}, "scales must be a list of finite numbers"),
    ],
)
def test_bad_scale_files_fail_when_the_spec_is_parsed(tmp_path, content, message):
    path = str(tmp_path / "missing.json") if content is None else _write(tmp_path, content)
    with pytest.raises(ScaleFileError, match=message) as info:
        MethodStack.parse(f"lpes:scale_file={path}")
    assert str(info.value).startswith("lpes: ")
