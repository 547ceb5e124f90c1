"""The `repo-train` lm-eval model on the real SmolLM2-135M-Instruct: baseline = lm-eval's `hf` bit for bit (chat
template on for the generations), `pi:scale=1.5` = `hf` with transformers' linear RoPE scaling, Ms-PoE through
the project's decode loop in all three request types."""

from __future__ import annotations

import json

import pytest
from lm_eval_tasks import TASKS, generations, loglikelihoods, responses, write_tasks

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("lm_eval_installed")]


@pytest.fixture(scope="module")
def setup(real_model_dir, tmp_path_factory):
    import lm_eval
    from lm_eval.tasks import TaskManager

    import evaluation.lm_eval_model  # noqa: F401  (registers repo-train)

    root = tmp_path_factory.mktemp("lm_eval_real")
    linear = root / "smollm2_linear_rope"  # the same weights (links), a config asking for linear RoPE x1.5
    linear.mkdir()
    for item in real_model_dir.iterdir():
        if item.name != "config.json":
            (linear / item.name).symlink_to(item)
    raw = json.loads((real_model_dir / "config.json").read_text())
    if "rope_parameters" in raw:
        raw["rope_parameters"].update(rope_type="linear", factor=1.5)
    else:
        raw["rope_scaling"] = {"rope_type": "linear", "factor": 1.5}
    (linear / "config.json").write_text(json.dumps(raw))
    tasks = write_tasks(root / "tasks")

    def evaluate(model: str, args: str, tasks_run=TASKS, chat: bool = False) -> dict:
        return lm_eval.simple_evaluate(
            model=model,
            model_args=args,
            tasks=list(tasks_run),
            task_manager=TaskManager(include_path=str(tasks)),
            log_samples=True,
            batch_size=4,
            device="cpu",
            apply_chat_template=chat,
        )

    return {"evaluate": evaluate, "model": real_model_dir, "linear": linear}


def test_baseline_equals_hf_exactly_with_and_without_the_chat_template(setup):
    evaluate, model = setup["evaluate"], setup["model"]
    theirs = evaluate("hf", f"pretrained={model},dtype=float32")
    ours = evaluate("repo-train", f"pretrained={model},dtype=float32,method=baseline")
    assert responses(ours) == responses(theirs)
    chat_theirs = evaluate("hf", f"pretrained={model},dtype=float32", ["tiny_gen"], chat=True)
    chat_ours = evaluate("repo-train", f"pretrained={model},dtype=float32", ["tiny_gen"], chat=True)
    assert generations(chat_ours) == generations(chat_theirs) and any(generations(chat_ours))
    assert generations(chat_ours) != generations(ours)  # the template was applied


def test_pi_equals_linear_rope_scaling_and_ms_poe_runs(setup):
    evaluate, model = setup["evaluate"], setup["model"]
    theirs = evaluate("hf", f"pretrained={setup['linear']},dtype=float32")
    ours = evaluate("repo-train", f"pretrained={model},dtype=float32,method=pi:scale=1.5")
    gap = max(abs(a - b) for a, b in zip(loglikelihoods(ours), loglikelihoods(theirs)))
    assert gap <= 1e-5 * max(abs(b) for b in loglikelihoods(theirs)), gap
    assert generations(ours) == generations(theirs)
    ms_poe = evaluate("repo-train", f"pretrained={model},dtype=float32,method=ms_poe")
    assert len(generations(ms_poe)) == 5 and all(v < 0 for v in loglikelihoods(ms_poe))
    assert loglikelihoods(ms_poe) != loglikelihoods(ours)
    assert ms_poe["config"]["repo_train_method"].startswith("ms_poe:")
