"""Model directories that are not this model's are refused from config.json alone, before any model is built.

`RePoOlmo2Config.from_pretrained` / `RePoOlmo2ForCausalLM.from_pretrained` on
another architecture's directory (also under a memory cap, so a regression
fails instead of eating the machine), and the loads that stay allowed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from bad_input_helpers import (
    config_only,
    olmo2_other_ffn,
    tiny_fields,
    write_config,
)
from transformers import Olmo2Config, Olmo2ForCausalLM

from repo_train.modeling import RePoOlmo2Config, RePoOlmo2ForCausalLM

WRONG_DIRECTORIES = {
    "no-config": ({}, "has no config.json"),
    "gpt2": ({"model_type": "gpt2", "n_embd": 64}, "model_type 'gpt2'"),
    "llama": ({"model_type": "llama", "hidden_size": 64}, "model_type 'llama'"),
    "no-model-type": ({"hidden_size": 64}, "no model_type"),
}


MEMORY_CAPPED = """
import json, resource, sys, time
cap = 3 * 2**30
resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
from repo_train.modeling import RePoOlmo2Config, RePoOlmo2ForCausalLM
results = {}
for path in sys.argv[1:]:
    for load in (RePoOlmo2Config.from_pretrained, RePoOlmo2ForCausalLM.from_pretrained):
        start = time.perf_counter()
        try:
            load(path)
            outcome = "loaded"
        except (ValueError, OSError) as err:
            outcome = f"{type(err).__name__}: {err}"
        except BaseException as err:  # MemoryError, RuntimeError from the allocator: the regression
            outcome = f"CRASH {type(err).__name__}: {str(err)[:200]}"
        results[f"{path}|{load.__qualname__}"] = [outcome, time.perf_counter() - start]
print(json.dumps(results))
"""


@pytest.mark.parametrize("loader", ["config", "model"])
@pytest.mark.parametrize("name", WRONG_DIRECTORIES)
def test_from_pretrained_refuses_other_directories_before_building(tmp_path, name, loader, monkeypatch):
    """Refused from config.json alone: building any model (the 7B default shape) fails this test."""
    config, phrase = WRONG_DIRECTORIES[name]
    path = config_only(tmp_path, name, **config)

    def tripwire(self, *args, **kwargs):
        raise AssertionError("a model was built from a directory that should have been refused")

    monkeypatch.setattr(RePoOlmo2ForCausalLM, "__init__", tripwire)
    load = RePoOlmo2Config.from_pretrained if loader == "config" else RePoOlmo2ForCausalLM.from_pretrained
    with pytest.raises((ValueError, FileNotFoundError), match=phrase) as info:
        load(path)
    message = str(info.value)
    assert "\n" not in message and "'olmo2'" in message and "'repo_olmo2'" in message and "pe_config" in message


@pytest.mark.slow
def test_from_pretrained_refuses_under_a_memory_cap(tmp_path):
    """The same refusals in a process limited to 3 GB of address space (a regression fails, not the machine)."""
    paths = [str(config_only(tmp_path, name, **WRONG_DIRECTORIES[name][0])) for name in WRONG_DIRECTORIES]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, "-c", MEMORY_CAPPED, *paths], capture_output=True, text=True, timeout=300, env=env, check=False
    )
    assert result.returncode == 0, result.stderr[-2000:]
    results = json.loads(result.stdout.strip().splitlines()[-1])
    assert len(results) == 2 * len(WRONG_DIRECTORIES)
    for key, (outcome, _seconds) in results.items():  # no time limit: the tripwire test shows nothing is built
        name = Path(key.split("|")[0]).name
        assert WRONG_DIRECTORIES[name][1] in outcome, (key, outcome)


def test_fresh_repo_weights_only_when_asked_for(tmp_path):
    """A vanilla OLMo-2 with position_method='repo' starts REPO fresh; the same directory claiming REPO does not."""
    path = tmp_path / "vanilla"
    Olmo2ForCausalLM(Olmo2Config(**tiny_fields())).save_pretrained(path)
    model = RePoOlmo2ForCausalLM.from_pretrained(path, position_method="repo", repo_start_layer=2)
    assert model.config.position_method == "repo"
    write_config(path, pe_config={"dynamic_pe_mode": "swigluex_multihead", "dynamic_pe_start_layer": 2})
    with pytest.raises(ValueError, match="holds no REPO weights .* pass position_method='repo'"):
        RePoOlmo2ForCausalLM.from_pretrained(path)
    # transformers' own opt-in for mis-shaped weights stays available
    wide = olmo2_other_ffn(tmp_path)
    with pytest.raises(ValueError, match="mis-shaped"):
        RePoOlmo2ForCausalLM.from_pretrained(wide, position_method="rope")
    model = RePoOlmo2ForCausalLM.from_pretrained(wide, position_method="rope", ignore_mismatched_sizes=True)
    assert model.config.intermediate_size == 96


def _model_snapshot(model) -> tuple:
    """What a policy install changes: each attention's class, policy and modules, and every weight."""
    from repo_train.modeling.attention import attention_modules

    layers = [
        (type(a), getattr(a, "position_policy", None), a.num_key_value_groups, sorted(a._modules))
        for a in attention_modules(model)
    ]
    return layers, {k: v.clone() for k, v in model.state_dict().items()}


@pytest.mark.parametrize(
    ("make", "error", "phrase"),
    [
        (lambda good: good[:-1], ValueError, "got 3 position policies for a model with 4 layers"),
        (lambda good: [*good[:2], "nope", good[3]], TypeError, r"policies\[2\] is 'nope' \(str\), not a Position"),
        (lambda good: [good[0], None, *good[2:]], TypeError, r"policies\[1\] is None"),
    ],
    ids=["wrong-length", "name-in-the-middle", "none-in-the-middle"],
)
def test_install_position_policies_with_a_bad_list_changes_nothing(make, error, phrase):
    """A refused install (Python API) leaves every layer's class, policy, modules and weights as they were."""
    from repo_train.modeling import install_position_policies
    from repo_train.modeling.methods import build_policies
    from repo_train.modeling.presets import tiny

    config = tiny(vocab_size=64, position_method="rope")
    model = RePoOlmo2ForCausalLM(config)
    repo = build_policies(tiny(vocab_size=64, position_method="repo", repo_start_layer=0))  # adds predictors
    before = _model_snapshot(model)
    with pytest.raises(error, match=phrase):
        install_position_policies(model, make(repo))
    layers, weights = _model_snapshot(model)
    assert layers == before[0]
    assert weights.keys() == before[1].keys() and all(torch.equal(weights[k], before[1][k]) for k in weights)
    install_position_policies(model, repo)  # the good list still installs (predictors added to every layer)
    assert len(model.state_dict()) > len(before[1])


@pytest.mark.parametrize("loader", ["config", "model"])
def test_from_pretrained_refuses_a_missing_local_path_at_once(tmp_path, loader):
    """A path that looks local and is not there is refused by our check, before transformers asks the hub (~30 s
    of retries offline; its own message differs); a config.json that is a JSON list is named, not a TypeError."""
    load = RePoOlmo2Config.from_pretrained if loader == "config" else RePoOlmo2ForCausalLM.from_pretrained
    for missing in (tmp_path / "nowhere", "./models/olmo2-1b", "olmo2-1b"):
        with pytest.raises(FileNotFoundError, match="does not exist; RePoOlmo2Config/RePoOlmo2ForCausalLM load a"):
            load(missing)
    listed = config_only(tmp_path, "listed")
    (listed / "config.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="config.json is not a model's config.json .*: it holds a JSON list"):
        load(listed)
