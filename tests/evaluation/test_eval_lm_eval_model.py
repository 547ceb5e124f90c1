"""The `repo-train` lm-eval model against independent paths, on a tiny random Llama and a local task set.

baseline = lm-eval's own `hf` (bit for bit); `pi:scale=2` = `hf` on a copy whose config asks transformers for
linear RoPE scaling; the project's decode loop (what per-batch methods run through) = `hf`'s forwards and
`generate`; CALIOPE / FiM refused before any load; the results file names the stack and the version.
"""

from __future__ import annotations

import json
import math
import shutil

import pytest
import torch
from bad_input_helpers import repo_model, with_tokenizer
from lm_eval_tasks import TASKS, generations, loglikelihoods, responses, write_tasks
from transformers import LlamaConfig, LlamaForCausalLM

from evaluation.cli import main as evaluation_main

pytestmark = pytest.mark.usefixtures("lm_eval_installed", "one_thread")


@pytest.fixture(scope="module")
def lm_eval_api():
    import lm_eval
    from lm_eval.tasks import TaskManager

    import evaluation.lm_eval_model as model_module

    return lm_eval, TaskManager, model_module


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """A 4-layer random Llama (weights spread so greedy choices have clear margins), its linear-RoPE twin, tasks."""
    root = tmp_path_factory.mktemp("lm_eval_model")
    plain = root / "llama"
    config = LlamaConfig(
        vocab_size=258, hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=256, pad_token_id=0, eos_token_id=1, bos_token_id=None,
    )  # fmt: skip
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = LlamaForCausalLM(config)
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() == 2:
                param.mul_(5.0)
    model.save_pretrained(plain)
    with_tokenizer(plain)
    linear = root / "llama_linear_rope"
    shutil.copytree(plain, linear)
    raw = json.loads((linear / "config.json").read_text())
    if "rope_parameters" in raw:  # transformers 5 names it so; 4.x reads rope_scaling
        raw["rope_parameters"].update(rope_type="linear", factor=2.0)
    else:
        raw["rope_scaling"] = {"rope_type": "linear", "factor": 2.0}
    (linear / "config.json").write_text(json.dumps(raw))
    return {"plain": plain, "linear": linear, "tasks": write_tasks(root / "tasks")}


def evaluate(lm_eval_api, folders, model, args: str, tasks=TASKS) -> dict:
    lm_eval, task_manager, _ = lm_eval_api
    return lm_eval.simple_evaluate(
        model=model,
        model_args=args,
        tasks=list(tasks),
        task_manager=task_manager(include_path=str(folders["tasks"])),
        log_samples=True,
        batch_size=2,
        device="cpu",
    )


@pytest.fixture(scope="module")
def hf_plain(lm_eval_api, folders):
    return evaluate(lm_eval_api, folders, "hf", f"pretrained={folders['plain']},dtype=float32")


def relative_gap(ours: list[float], theirs: list[float]) -> float:
    """max |Δ| over the largest |value|: float noise of a different summation order is ~1e-6 here."""
    assert len(ours) == len(theirs) and ours
    return max(abs(a - b) for a, b in zip(ours, theirs)) / max(abs(b) for b in theirs)


def test_baseline_is_lm_evals_hf_bit_for_bit_and_the_results_name_stack_and_version(lm_eval_api, folders, hf_plain):
    import repo_train

    ours = evaluate(lm_eval_api, folders, "repo-train", f"pretrained={folders['plain']},dtype=float32")
    assert responses(ours) == responses(hf_plain)  # generations, multiple-choice and rolling log-likelihoods
    assert len(generations(ours)) == 5 and len(loglikelihoods(ours)) == 5 * 3 + 5
    assert ours["config"]["repo_train_method"] == "baseline"
    assert ours["config"]["repo_train_version"] == repo_train.__version__


@pytest.fixture(scope="module")
def hf_linear(lm_eval_api, folders):
    return evaluate(lm_eval_api, folders, "hf", f"pretrained={folders['linear']},dtype=float32")


def test_pi_equals_transformers_linear_rope_scaling(lm_eval_api, folders, hf_plain, hf_linear):
    ours = evaluate(
        lm_eval_api, folders, "repo-train", f"pretrained={folders['plain']},dtype=float32,method=pi:scale=2"
    )
    assert relative_gap(loglikelihoods(hf_linear), loglikelihoods(hf_plain)) > 1e-3  # the twin really is scaled
    assert relative_gap(loglikelihoods(ours), loglikelihoods(hf_linear)) <= 1e-6
    assert generations(ours) == generations(hf_linear)
    assert ours["config"]["repo_train_method"] == "pi:scale=2"


@pytest.mark.slow  # whole lm-eval calls, seconds each: the fast suite keeps the equalities with hf
def test_a_uniform_lpes_scale_file_equals_linear_rope_scaling(lm_eval_api, folders, hf_linear, tmp_path):
    scale_file = tmp_path / "uniform.json"
    scale_file.write_text(json.dumps({"format_version": 1, "num_layers": 4, "scales": [2.0] * 4}))
    args = f"pretrained={folders['plain']},dtype=float32,method=lpes:scale_file={scale_file}"
    ours = evaluate(lm_eval_api, folders, "repo-train", args, tasks=["tiny_gen", "tiny_mc"])
    assert generations(ours) == generations(hf_linear)
    theirs = loglikelihoods(hf_linear)[:15]  # tiny_mc's, in the same order
    assert relative_gap(loglikelihoods(ours), theirs) <= 1e-6
    assert ours["config"]["repo_train_method"] == f"lpes:scale_file={scale_file}"


@pytest.mark.slow  # whole lm-eval calls, seconds each: the fast suite keeps the equalities with hf
def test_the_decode_loop_path_equals_hf(lm_eval_api, folders, hf_plain):
    """What per-batch methods (Ms-PoE, PCD, Attention Buckets) run through: the project's greedy loop for
    generate_until, its teacher forcing for log-likelihoods. With nothing attached it must give hf's answers."""
    _, _, module = lm_eval_api
    lm = module.RepoTrainLM(pretrained=str(folders["plain"]), dtype="float32", device="cpu", batch_size=2)
    lm.needs_loop = True
    ours = evaluate(lm_eval_api, folders, lm, "")
    assert generations(ours) == generations(hf_plain)
    assert relative_gap(loglikelihoods(ours), loglikelihoods(hf_plain)) <= 1e-6


@pytest.mark.slow  # whole lm-eval calls, seconds each: the fast suite keeps the equalities with hf
@pytest.mark.parametrize("spec", ["ms_poe", "attention_buckets:bases=10000|20000"])
def test_per_batch_methods_run_in_all_three_request_types(lm_eval_api, folders, hf_plain, spec):
    args = f"pretrained={folders['plain']},dtype=float32,method={spec}"
    ours = evaluate(lm_eval_api, folders, "repo-train", args)
    values = loglikelihoods(ours)
    assert all(math.isfinite(v) and v < 0 for v in values) and len(generations(ours)) == 5
    assert relative_gap(values, loglikelihoods(hf_plain)) > 1e-4  # the method acted
    assert ours["config"]["repo_train_method"].startswith(spec.partition(":")[0] + ":")


@pytest.mark.slow  # whole lm-eval calls, seconds each: the fast suite keeps the equalities with hf
def test_positional_hidden_runs_from_a_config_file_in_all_three_request_types(lm_eval_api, folders, hf_plain, tmp_path):
    config = tmp_path / "positional_hidden.json"  # the authors' keys, for the tiny model's width and depth
    config.write_text(
        json.dumps(
            {
                "dims": [3, 17],
                "layers": [0, 1],
                "factor": 0,
                "skip_first": 0,
                "last_recompute_tokens": 1,
                "change_value": False,
            }
        )
    )
    args = f"pretrained={folders['plain']},dtype=float32,method=positional_hidden:config={config}"
    ours = evaluate(lm_eval_api, folders, "repo-train", args)
    values = loglikelihoods(ours)
    assert all(math.isfinite(v) and v < 0 for v in values) and len(generations(ours)) == 5
    assert relative_gap(values, loglikelihoods(hf_plain)) > 1e-4  # the method acted
    assert ours["config"]["repo_train_method"] == f"positional_hidden:config={config}"


@pytest.mark.slow  # whole lm-eval calls, seconds each: the fast suite keeps the equalities with hf
def test_pcd_generates_but_refuses_loglikelihood_in_one_line(lm_eval_api, folders):
    _, _, module = lm_eval_api
    args = f"pretrained={folders['plain']},dtype=float32,method=pcd"
    assert len(generations(evaluate(lm_eval_api, folders, "repo-train", args, tasks=["tiny_gen"]))) == 5
    with pytest.raises(module.MethodRefused, match="loglikelihood under method 'pcd") as refusal:
        evaluate(lm_eval_api, folders, "repo-train", args, tasks=["tiny_mc"])
    assert "\n" not in str(refusal.value)


@pytest.mark.parametrize("spec", ["caliope", "fim", "pi:scale=2+caliope"])
def test_document_span_methods_are_refused_before_any_load(lm_eval_api, spec):
    _, _, module = lm_eval_api
    with pytest.raises(module.MethodRefused, match="no document spans") as refusal:
        module.RepoTrainLM(pretrained="/nonexistent/model", method=spec)  # no such directory: nothing loaded
    assert "\n" not in str(refusal.value)


def test_an_unquoted_multi_parameter_spec_is_refused_naming_the_quoting(lm_eval_api):
    """lm-eval splits --model_args at commas outside quotes: the second parameter would become a model argument."""
    _, _, module = lm_eval_api
    with pytest.raises(module.MethodRefused, match=r"\['max_ratio'\].*quote") as refusal:
        module.RepoTrainLM(pretrained="/nonexistent/model", method="ms_poe:min_ratio=1.2", max_ratio=1.8)
    assert "\n" not in str(refusal.value)


@pytest.fixture
def quiet_lm_eval_logging(lm_eval_api, monkeypatch):
    """lm-eval's `setup_logging` binds a handler to the stderr of its first call (here pytest's capture, closed
    after the test): later tests' lm-eval logs would hit a closed stream. Its own logging is not under test."""
    monkeypatch.setattr(lm_eval_api[2], "setup_logging", lambda: None)


@pytest.mark.slow  # whole lm-eval calls, seconds each: the fast suite keeps the equalities with hf
@pytest.mark.usefixtures("quiet_lm_eval_logging")
def test_the_command_passes_argv_to_lm_eval_and_writes_the_stack(folders, tmp_path):
    out = tmp_path / "results"
    argv = ["lm-eval", "run", "--model", "repo-train", "--model_args",
            f"pretrained={folders['plain']},dtype=float32,method=pi:scale=2", "--include_path", str(folders["tasks"]),
            "--tasks", "tiny_mc", "--device", "cpu", "--batch_size", "2", "--output_path", str(out)]  # fmt: skip
    assert evaluation_main(argv) == 0
    (written,) = list(out.rglob("results_*.json"))
    config = json.loads(written.read_text())["config"]
    assert config["model"] == "repo-train" and config["model_args"]["method"] == "pi:scale=2"  # as given
    assert config["repo_train_method"] == "pi:scale=2" and config["repo_train_version"]


@pytest.mark.slow  # whole lm-eval calls, seconds each: the fast suite keeps the equalities with hf
@pytest.mark.usefixtures("quiet_lm_eval_logging")
def test_the_command_refuses_caliope_in_one_line_with_exit_2(folders, capsys):
    # a real model directory: a missing one is refused first, as `evaluation run --model` refuses it
    argv = ["lm-eval", "run", "--model", "repo-train", "--model_args", f"pretrained={folders['plain']},method=caliope",
            "--include_path", str(folders["tasks"]), "--tasks", "tiny_mc", "--device", "cpu"]  # fmt: skip
    assert evaluation_main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("python -m evaluation lm-eval: error: method 'caliope' is not available in lm-eval")


def test_a_missing_lm_eval_is_one_line_naming_the_extra(monkeypatch, capsys):
    import evaluation.lm_eval_command as command

    monkeypatch.setattr(command.importlib.util, "find_spec", lambda name: None)
    assert command.main(["run", "--tasks", "x"]) == 2
    assert capsys.readouterr().err.strip() == command.MISSING and "pip install -e '.[crosscheck]'" in command.MISSING


@pytest.mark.slow  # whole lm-eval calls, seconds each: the fast suite keeps the equalities with hf
def test_a_repo_checkpoint_evaluates_through_it(lm_eval_api, tmp_path, folders):
    """A `repo_olmo2` directory (save_pretrained) loads and scores as `hf` scores it; `pi` is refused there in
    one line, as the project refuses it (REPO layers learn their positions: there is no RoPE angle to scale)."""
    _, _, module = lm_eval_api
    checkpoint = repo_model(tmp_path)
    ours = evaluate(lm_eval_api, folders, "repo-train", f"pretrained={checkpoint},dtype=float32", tasks=["tiny_mc"])
    theirs = evaluate(lm_eval_api, folders, "hf", f"pretrained={checkpoint},dtype=float32", tasks=["tiny_mc"])
    assert responses(ours) == responses(theirs) and len(loglikelihoods(ours)) == 15
    with pytest.raises(module.MethodRefused, match="'repo' policy") as refusal:
        module.RepoTrainLM(pretrained=str(checkpoint), method="pi:scale=2", dtype="float32", device="cpu")
    assert "\n" not in str(refusal.value)


def test_sampling_is_refused_where_the_greedy_loop_decodes(lm_eval_api, folders):
    _, _, module = lm_eval_api
    lm = module.RepoTrainLM(pretrained=str(folders["plain"]), method="ms_poe", dtype="float32", device="cpu")
    context = torch.tensor([[40, 41, 42]])
    with pytest.raises(module.MethodRefused, match="decodes greedily in the project.s loop") as refusal:
        lm._model_generate(context, 6, ["\n"], attention_mask=torch.ones_like(context), do_sample=True, temperature=0.7)
    assert "\n" not in str(refusal.value)


def test_the_published_repo_layout_keeps_its_repo_weights(lm_eval_api, tmp_path):
    """`olmo2` + `pe_config` (the published RePo directories): the plain Auto class would drop the predictors."""
    _, _, module = lm_eval_api
    checkpoint = repo_model(tmp_path)
    published = tmp_path / "published"
    shutil.copytree(checkpoint, published)
    config = json.loads((published / "config.json").read_text())
    start = config.pop("repo_start_layer")
    for key in ("position_method", "repo_hidden_size"):
        config.pop(key, None)
    config.update(
        model_type="olmo2", pe_config={"dynamic_pe_mode": "swigluex_multihead", "dynamic_pe_start_layer": start}
    )
    (published / "config.json").write_text(json.dumps(config))
    ours, saved = (
        module.RepoTrainLM(pretrained=str(path), dtype="float32", device="cpu") for path in (published, checkpoint)
    )
    assert type(ours.model).__name__ == "RePoOlmo2ForCausalLM"
    ids = torch.tensor([[40, 41, 42, 43, 44]])
    with torch.no_grad():
        assert torch.equal(ours.model(ids).logits, saved.model(ids).logits)


@pytest.mark.slow  # whole lm-eval calls, seconds each: the fast suite keeps the equalities with hf
def test_string_runs_in_all_three_request_types(lm_eval_api, folders, hf_plain):
    """STRING with two parameters (model_args as a dict, as lm-eval's Python API takes them); S = 8 shifts the
    tiny tasks' far keys, so its answers differ from hf's."""
    args = {
        "pretrained": str(folders["plain"]),
        "dtype": "float32",
        "method": "string:shifted_offset=8,small_local_value=2",
    }
    ours = evaluate(lm_eval_api, folders, "repo-train", args)
    values = loglikelihoods(ours)
    assert all(math.isfinite(v) and v < 0 for v in values) and len(generations(ours)) == 5
    assert relative_gap(values, loglikelihoods(hf_plain)) > 1e-4  # the method acted
    assert ours["config"]["repo_train_method"].startswith("string:shifted_offset=8,small_local_value=2,")
