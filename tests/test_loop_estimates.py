"""The dry run's hour estimates of the search and the evaluations (`workflows.loop_estimates`) against hand
computations of docs/evaluation.md's formulas; training's plan is tests/training/test_memory_plan.py's."""

from __future__ import annotations

import pytest

from repo_train.modeling.presets import preset
from workflows import loop_estimates as estimates

ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]


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
