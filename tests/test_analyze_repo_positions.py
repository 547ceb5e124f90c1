"""scripts/analyze_repo_positions.py on a saved tiny REPO model: statistics, files, and the no-REPO error."""

import json
from pathlib import Path

import pytest
import torch
from script_loader import load_script

from evaluation.model_loading import byte_tokenizer
from repo_train.modeling import RePoOlmo2ForCausalLM
from repo_train.modeling.presets import tiny

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "analyze_repo_positions.py"


def _script():
    return load_script("analyze_repo_positions")


def _saved_model(path: Path, method: str) -> Path:
    tokenizer = byte_tokenizer()
    torch.manual_seed(0)
    config = tiny(vocab_size=len(tokenizer), pad_token_id=0, eos_token_id=1, position_method=method)
    RePoOlmo2ForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.mark.slow  # the analysis script end to end (~4 s): the fast suite stays under 5 min
def test_repo_model_statistics_and_files(tmp_path):
    model = _saved_model(tmp_path / "repo", "repo")
    out = tmp_path / "out"
    args = ["--model", str(model), "--task", "kv", "--task_param", "num_keys=4", "--task_param", "key_chars=2"]
    _script().main([*args, "--num_examples", "3", "--out", str(out)])
    result = json.loads((out / "positions.json").read_text())
    layers = result["layers"]
    assert len(layers) == 4 and len(result["tokens"]) == 3
    repo_layers = [entry for entry in layers if entry is not None]
    assert repo_layers, "the tiny preset's repo method has REPO layers"
    for entry in repo_layers:
        assert len(entry["range"]) == 4 and all(r >= 0 for r in entry["range"])
        for head in range(4):
            shares = [entry[name][head] for name in ("constant", "monotonic", "hybrid")]
            assert all(0 <= s <= 1 for s in shares), shares
            assert sum(shares) == pytest.approx(1.0)
    table = (out / "positions.md").read_text()
    assert table.count("\n| ") == 1 + 4 * len(repo_layers)  # header row + one row per REPO head
    assert (out / "ranges.png").stat().st_size > 0
    assert sorted(p.name for p in out.glob("positions-layer*.png")) == [
        f"positions-layer{i}.png" for i, entry in enumerate(layers) if entry is not None
    ]


def test_model_without_repo_layers_is_a_clear_error(tmp_path):
    model = _saved_model(tmp_path / "rope", "rope")
    with pytest.raises(SystemExit, match="no REPO layer"):
        _script().main(
            ["--model", str(model), "--task_param", "num_keys=3", "--num_examples", "1", "--out", str(tmp_path / "out")]
        )
