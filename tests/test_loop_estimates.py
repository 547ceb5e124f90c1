"""The dry run's hour estimates (`workflows.loop_estimates`) against hand computations of the job pages'
formulas (docs/training.md, docs/evaluation.md)."""

from __future__ import annotations

import pytest

from repo_train.modeling.accounting import training_flops_per_token
from repo_train.modeling.presets import preset
from workflows import loop_estimates as estimates

ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]


def test_training_hours_follow_tokens_flops_and_mfu():
    hours, how = estimates.training_hours(ROOT / "configs/train/olmo2-1b-stage2-rope.yaml", [], gpus=8)
    tokens = 23842 * 512 * 4096
    expected = tokens * training_flops_per_token(preset("olmo2-1b"), 4096) / (0.40 * 989e12 * 8) / 3600
    assert hours == pytest.approx(expected, rel=1e-12) and 36 < hours < 38  # docs/training.md: ≈ 37 h on 8
    assert how == "50.0B tokens at 40% MFU"
    shorter, _ = estimates.training_hours(
        ROOT / "configs/train/olmo2-1b-stage2-rope.yaml", ["--trainer.max_steps", "2384"], gpus=4
    )
    assert shorter == pytest.approx(expected * 2384 / 23842 * 2, rel=1e-12)  # a tenth of the steps, half the GPUs


def test_evaluation_hours_count_prompts_positions_and_method_passes():
    model = preset("olmo2-7b")
    per_prompt = estimates.prompt_seconds(model, "mdqa", 20)
    tokens = 137.5 * 20 + 1.0  # the measured 2,751-token MDQA-20 prompt
    d, layers, ffn = 4096, 32, model.intermediate_size
    body = layers * (4 * d * d + 3 * d * ffn)
    prefill = (2 * body * tokens + 4 * layers * d * tokens**2) / (0.35 * 989e12)
    assert per_prompt == pytest.approx(prefill + 32 * 0.025 / 8, rel=1e-12)
    # docs/evaluation.md: the 7B MDQA-20 baseline over 2,500 prompts ≈ 9 min on one H100
    hours, how = estimates.evaluation_hours(model, ["mdqa"], {"mdqa": 20}, 500, "ends-20-50-80", ["baseline"], 1)
    assert 7 < hours * 60 < 11 and how == "2,500 prompts"
    twice, _ = estimates.evaluation_hours(model, ["mdqa"], {"mdqa": 20}, 500, "ends-20-50-80", ["baseline", "pcd"], 1)
    assert twice == pytest.approx(3 * hours)  # PCD runs two forwards
    assert estimates.method_cost("fim", 20) == 22 and estimates.positions_count("0,4,9", 10) == 3
    assert estimates.evaluation_hours(model, ["ruler_vt"], {}, 10, "all", ["baseline"], 1) is None  # unknown length
    assert estimates.described(None).startswith("time unknown")
