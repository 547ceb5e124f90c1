"""`check-gpu` on a machine without a GPU: its table, tolerances and exit code, and its checks with the CPU as device.

The checks compare a device against the CPU; here the CPU stands in for the
device, so a check must pass (bf16 or fp32 on the CPU vs fp32 on the CPU,
cache vs recomputation, the harness against itself) and must fail when the
thing it checks is broken (a perturbed model, decoding steps at the wrong
positions, differing tokens, an impossible MFU).
"""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from repo_train.modeling import RePoOlmo2ForCausalLM
from workflows import cli
from workflows.gpu_check import groups, harness_tokens, positions, throughput
from workflows.gpu_check.method_cases import CASE_NAMES, CASES, MethodCase
from workflows.gpu_check.rows import (
    FAIL,
    PASS,
    SKIP,
    Row,
    at_least,
    exit_code,
    guarded,
    relative_difference,
    render_table,
    within,
)

pytestmark = pytest.mark.usefixtures("one_thread")
CASE = {case.name: case for case in CASES}


# -- the table, the tolerance rule, the exit code ---------------------------------------------------------------------


def test_relative_difference_is_measured_against_the_scale_of_the_values():
    expected = torch.tensor([[100.0, -50.0], [0.001, 2.0]])
    assert relative_difference(expected.clone(), expected) == 0.0
    nudged = expected.clone()
    nudged[1, 0] += 0.5  # a large change of a small entry counts against max |expected| = 100
    assert relative_difference(nudged, expected) == pytest.approx(0.5 / 100)
    masked = torch.tensor([1.0, -math.inf, 3.0])
    assert relative_difference(torch.tensor([1.0, -math.inf, 2.7]), masked) == pytest.approx(0.1)
    assert relative_difference(torch.tensor([1.0, 0.0, 3.0]), masked) == math.inf  # masked in one, not the other
    assert relative_difference(torch.zeros(2), torch.zeros(3)) == math.inf


def test_rows_pass_within_their_threshold_and_fail_outside_it():
    assert within("a", 0.05, 0.1).result == PASS
    assert within("a", 0.1, 0.1).result == PASS
    assert within("a", 0.11, 0.1).result == FAIL
    assert within("a", math.nan, 0.1).result == FAIL
    assert within("a", math.inf, 0.1).result == FAIL
    assert at_least("b", 0.95, 0.5, unit="nats").result == PASS
    assert at_least("b", 0.2, 0.5).result == FAIL
    assert at_least("b", math.nan, 0.5).result == FAIL
    with pytest.raises(ValueError, match="result must be one of"):
        Row("c", "maybe")


def test_exit_code_is_zero_only_when_nothing_failed():
    passed, skipped, failed = Row("p", PASS), Row("s", SKIP, note="flash-attn not installed"), Row("f", FAIL)
    assert exit_code([passed, skipped]) == 0  # a stated skip is not a failure
    assert exit_code([passed, skipped, failed]) == 1
    assert exit_code([]) == 1  # nothing checked is not a pass


def test_a_check_that_raises_is_one_failed_row_with_a_one_line_message():
    def broken():
        raise RuntimeError("CUDA error: an illegal memory access\nwas encountered")

    rows = guarded("repo: bf16", broken)
    assert len(rows) == 1 and rows[0].result == FAIL and rows[0].name == "repo: bf16"
    assert rows[0].note.startswith("RuntimeError: CUDA error: an illegal memory access was encountered [")
    assert "\n" not in rows[0].note and "test_check_gpu.py" in rows[0].note
    assert guarded("fine", lambda: [Row("x", PASS)]) == [Row("x", PASS)]


def test_table_has_one_line_per_row_and_a_verdict():
    rows = [within("rope: bf16 cuda vs fp32 cpu", 0.013, 0.1, "logits of 6 steps"), Row("f", SKIP, note="why")]
    text = render_table(rows)
    lines = text.splitlines()
    assert [cell.strip() for cell in lines[0].split("|")[1:-1]] == ["check", "result", "measured", "threshold", "note"]
    assert set(lines[1]) == {"|", "-"} and len({len(line) for line in lines[:4]}) == 1  # aligned columns
    assert "| rope: bf16 cuda vs fp32 cpu | PASS   | 0.013    | <= 0.1 of max |ref| | logits of 6 steps |" in text
    assert text.endswith("1 passed, 0 failed, 1 skipped: all checks passed")
    assert render_table([*rows, Row("x", FAIL)]).endswith("1 passed, 1 failed, 1 skipped: SOME CHECKS FAILED")


# -- the command line -------------------------------------------------------------------------------------------------


def test_the_old_spelling_is_refused_in_one_line_naming_the_new_one(capsys):
    from repo_train import cli as training_cli

    assert training_cli.main(["check-gpu", "--checks", "positions"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "python -m workflows check-gpu" in err, err


def test_without_cuda_the_command_checks_nothing_and_exits_zero(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert cli.main(["check-gpu"]) == 0
    assert capsys.readouterr().out == "no CUDA: nothing checked\n"
    assert cli.main(["check-gpu", "--checks", "positions,harness", "--methods", "rope,repo"]) == 0


def test_bad_options_are_one_line_errors(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert cli.main(["check-gpu", "--methods", "rope,alibi"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m workflows check-gpu: error: --methods 'rope,alibi': unknown ['alibi']")
    assert "'attention_buckets'" in err and "Traceback" not in err and err.count("\n") == 1
    assert cli.main(["check-gpu", "--checks", ","]) == 2
    assert "--checks ',': empty" in capsys.readouterr().err
    assert cli.main(["check-gpu", "--pairs", "0"]) == 2
    assert "option --pairs: expected a positive integer" in capsys.readouterr().err


@pytest.mark.slow  # every check-gpu group (~3 s): the fast suite stays under 5 min
def test_the_groups_run_on_the_cpu_standing_in_for_the_gpu(tmp_path, capsys):
    """What `run` does after its CUDA check, with device "cpu": the rows of two groups, every one passing."""
    options = SimpleNamespace(train_processes=1, seq_len=8, pairs=1, peak_tflops=None)
    rows = groups.run_checks("cpu", ["positions", "harness"], ["pi"], tmp_path, options)
    assert [row.name for row in rows] == [
        "pi: bf16 cpu vs fp32 cpu", "pi: kv-cache vs recompute", "pi: flash_attention_2 vs sdpa",
        "harness: greedy tokens cpu vs cpu", "harness: runner records cpu vs cpu",
    ]  # fmt: skip
    assert exit_code(rows) == 0, render_table(rows)
    assert "[check-gpu] positions done in" in capsys.readouterr().err


# -- the position methods, the CPU as device --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def method_inputs():
    """name -> (model, tokenizer, prompts), built once for the module's tests."""
    built = {}

    def get(name):
        if name not in built:
            model, tokenizer = positions.tiny_model(CASE[name].position_method)
            built[name] = model, tokenizer, positions.check_prompts(tokenizer)
        return built[name]

    return get


@pytest.mark.parametrize("name", CASE_NAMES)
def test_bf16_and_cached_decoding_of_every_method_pass_on_the_cpu(name, method_inputs, tmp_path):
    case = CASE[name]
    model, tokenizer, prompts = method_inputs(name)
    reference = positions.reference_decoding(case, model, tokenizer, prompts, tmp_path)
    assert reference.logits.shape == (positions.STEPS, 2, len(tokenizer))
    assert reference.tokens.shape == (2, positions.STEPS)
    bf16 = positions.precision_row(case, model, tokenizer, prompts, tmp_path, reference, "cpu")
    assert bf16.result == PASS and 1e-4 < float(bf16.measured) < positions.BF16_TOLERANCE, bf16  # bf16 is not fp32
    cache = positions.cache_row(case, model, tokenizer, prompts, tmp_path, "cpu")
    assert cache.result == PASS and cache.name == f"{name}: kv-cache vs recompute", cache


@pytest.mark.parametrize("name", ["rope", "repo", "caliope"])
def test_a_perturbed_model_fails_the_precision_check(name, method_inputs, tmp_path):
    case = CASE[name]
    model, tokenizer, prompts = method_inputs(name)
    reference = positions.reference_decoding(case, model, tokenizer, prompts, tmp_path)
    same = positions.precision_row(case, model, tokenizer, prompts, tmp_path, reference, "cpu", torch.float32)
    assert same.result == PASS and float(same.measured) < 1e-5, same  # the unperturbed model in fp32
    perturbed = positions.on_device(model, "cpu", torch.float32)
    with torch.no_grad():
        head = perturbed.lm_head.weight
        head.add_(torch.randn(head.shape, generator=torch.Generator().manual_seed(1)) * head.std() * 0.5)
    row = positions.precision_row(case, perturbed, tokenizer, prompts, tmp_path, reference, "cpu", torch.float32)
    assert row.result == FAIL and float(row.measured) > positions.BF16_TOLERANCE, row


@pytest.mark.parametrize("name", ["rope", "caliope", "fim"])
def test_decoding_steps_at_wrong_positions_fail_the_cache_check(name, method_inputs, tmp_path, monkeypatch):
    """A cache path that feeds each new token one position too far: each recomputation strategy sees it."""
    original = RePoOlmo2ForCausalLM.forward

    def one_position_late(self, *args, **kwargs):
        ids, position_ids = kwargs.get("input_ids"), kwargs.get("position_ids")
        if ids is not None and ids.shape[1] == 1 and position_ids is not None:
            kwargs["position_ids"] = position_ids + 1
        return original(self, *args, **kwargs)

    model, tokenizer, prompts = method_inputs(name)
    monkeypatch.setattr(RePoOlmo2ForCausalLM, "forward", one_position_late)
    row = positions.cache_row(CASE[name], model, tokenizer, prompts, tmp_path, "cpu")
    assert row.result == FAIL and float(row.measured) > 10 * positions.CACHE_TOLERANCE, row


def test_flash_attention_rows_say_why_they_are_skipped(method_inputs, tmp_path, monkeypatch):
    model, tokenizer, prompts = method_inputs("rope")
    monkeypatch.setattr(positions, "flash_attn_installed", lambda: False)
    row = positions.flash_row(CASE["rope"], model, tokenizer, prompts, tmp_path, None, "cuda")
    assert row == Row("rope: flash_attention_2 vs sdpa", SKIP,
                      note="flash-attn not installed (pip install flash-attn): flash_attention_2 not checked")  # fmt: skip
    monkeypatch.setattr(positions, "flash_attn_installed", lambda: True)
    row = positions.flash_row(CASE["fim"], model, tokenizer, prompts, tmp_path, None, "cuda")
    assert row.result == SKIP and row.note.startswith("not applicable: fim's attention probe wraps SDPA")


def test_an_unknown_method_name_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"unknown position method\(s\) \['alibi'\]"):
        positions.position_method_rows("cpu", tmp_path, ("rope", "alibi"))


# -- the harness, the throughput --------------------------------------------------------------------------------------


def test_harness_tokens_and_records_compare_equal_runs_and_catch_a_difference():
    tokens = [[5, 6, 7], [8, 9]]
    assert harness_tokens.compare_tokens("t", tokens, [list(t) for t in tokens]).result == PASS
    row = harness_tokens.compare_tokens("t", [[5, 6, 7], [8, 4]], tokens)
    assert row.result == FAIL and row.measured == "1/2 prompts equal" and "first differing prompt 1" in row.note
    assert harness_tokens.compare_tokens("t", [], []).result == FAIL
    record = {"prediction": "ab", "score": 1.0, "stop_reason": "stop", "prompt_tokens": 40}
    assert harness_tokens.compare_records("r", {"a": dict(record)}, {"a": record}).result == PASS
    assert harness_tokens.compare_records("r", {"a": {**record, "score": 0.0}}, {"a": record}).result == FAIL
    assert harness_tokens.compare_records("r", {"b": record}, {"a": record}).result == FAIL


def test_harness_decodes_the_same_tokens_cpu_against_cpu():
    row = harness_tokens.tokens_row("cpu")
    assert row.result == PASS and row.measured == "9/9 prompts equal", row
    tokens = harness_tokens.harness_tokens("cpu")
    assert sum(len(set(t)) > 1 for t in tokens) >= 3  # the sharpened model does not just repeat one token


def test_peak_flops_table():
    assert throughput.peak_tflops("NVIDIA H100 80GB HBM3") == 989.0
    assert throughput.peak_tflops("NVIDIA H100 PCIe") == 756.0
    assert throughput.peak_tflops("NVIDIA A100-SXM4-80GB") == 312.0
    assert throughput.peak_tflops("NVIDIA L40S") == 362.0
    assert throughput.peak_tflops("NVIDIA L4") == 121.0
    assert throughput.peak_tflops("Tesla T4") is None


def test_throughput_rows_report_tokens_per_second_and_fail_an_impossible_mfu():
    # the step-time limit is a GPU's; on a shared CPU the ratio is noise, so the test sets limits it cannot miss
    rows = throughput.throughput_rows("cpu", "tiny", seq_len=32, pairs=2, warmup=1, max_repo_ratio=1e9)
    assert [row.result for row in rows] == [PASS, PASS, PASS], rows
    assert rows[0].measured.endswith("tok/s") and "no peak FLOP/s known for 'cpu'" in rows[0].note
    assert rows[2].name == "throughput: repo / rope step time" and "FLOPs ratio 1.0" in rows[2].note
    rows = throughput.throughput_rows("cpu", "tiny", seq_len=32, pairs=1, warmup=0, peak=1e-9, max_repo_ratio=1e-9)
    assert [row.result for row in rows] == [FAIL, FAIL, FAIL] and "MFU" in rows[0].measured  # MFU >> 1, ratio > 0


@pytest.mark.slow  # two torchrun runs of `python -m repo_train fit` under the CPU DeepSpeed engine, then export
def test_lightning_deepspeed_rows_pass_on_the_cpu(tmp_path):
    from workflows.gpu_check.training_run import training_rows

    rows = training_rows("cpu", tmp_path)
    assert [row.name for row in rows] == [
        "train: loss falls (cpu, 20 steps)", "train: checkpoints saved", "train: resume continues exactly",
        "train: export loads (HF Auto class)",
    ], render_table(rows)  # fmt: skip
    assert exit_code(rows) == 0, render_table(rows)
    assert (tmp_path / "commands.sh").read_text().count("repo_train fit --config") == 2


def test_a_relative_workdir_reaches_the_training_runs_as_an_absolute_path(tmp_path, monkeypatch):
    """The runs start inside the workdir: a relative config path there named a file inside itself (check-gpu on an
    H200, 2026-11-28: `--workdir .device-kit/check-gpu-N` failed the training group with "File does not exist")."""
    import subprocess

    from workflows.gpu_check import training_run

    seen = {}

    def fit(runner, title, config, processes, *more):
        seen["config"], seen["cwd"] = config, runner.cwd
        raise subprocess.CalledProcessError(2, "fit")

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(training_run, "_fit", fit)
    rows = training_run.training_rows("cpu", Path("relative") / "training")
    assert rows[0].result == FAIL  # the stand-in fit failed, as it should
    assert seen["config"].is_absolute() and seen["config"].is_file(), seen
    assert seen["config"] == tmp_path / "relative" / "training" / "train-a.yaml"


def test_pcd_keeps_every_token_of_the_models_vocabulary(tmp_path):
    """A top-k set smaller than the vocabulary can differ between bf16 and fp32 (an infinite difference): pcd's
    gamma is the checked model's vocabulary (the tiny model's 260 tokens and SmolLM2's 49,152 alike)."""
    for vocab_size in (260, 49152):
        config = SimpleNamespace(vocab_size=vocab_size, num_hidden_layers=4)
        (pcd,) = positions.method_stack(CASE["pcd"], tmp_path, config).methods
        assert pcd.gamma == vocab_size
    (lpes,) = positions.method_stack(CASE["lpes"], tmp_path, config).methods
    assert Path(lpes.scale_file).is_file()


# -- the real model ---------------------------------------------------------------------------------------------------
def test_without_the_real_model_its_group_is_one_skip_row(tmp_path):
    rows = positions.real_model_rows("cpu", tmp_path, tmp_path / "no-model")
    assert [(row.name, row.result) for row in rows] == [("real model", SKIP)]
    assert "python -m repo_train real-model" in rows[0].note


@pytest.mark.slow
def test_the_real_model_group_passes_on_the_cpu(real_model_dir, tmp_path):
    """bf16 vs fp32 and cache vs recomputation of two evaluation methods on SmolLM2's 30 trained layers."""
    rows = positions.real_model_rows("cpu", tmp_path, real_model_dir, ("pi", "caliope"))
    name = real_model_dir.name
    assert [row.name for row in rows] == [  # in the registry's order
        f"{name} caliope: bf16 cpu vs fp32 cpu", f"{name} caliope: kv-cache vs recompute",
        f"{name} caliope: flash_attention_2 vs sdpa",
        f"{name} pi: bf16 cpu vs fp32 cpu", f"{name} pi: kv-cache vs recompute", f"{name} pi: flash_attention_2 vs sdpa",
    ]  # fmt: skip
    assert exit_code(rows) == 0, render_table(rows)


def test_cases_come_from_the_registries(monkeypatch):
    """A newly registered evaluation method is checked with its defaults, without an edit in gpu_check."""
    from evaluation.methods import METHODS, Baseline
    from repo_train.modeling.methods import position_methods
    from workflows.gpu_check.method_cases import registered_cases

    names = [case.name for case in registered_cases()]
    assert set(position_methods()) <= set(names) and names[0] == "rope"
    assert set(METHODS) - {"baseline"} <= set(names) and "baseline" not in names
    monkeypatch.setitem(METHODS, "toy_calibrator", Baseline)
    added = [case for case in registered_cases() if case.name == "toy_calibrator"]
    assert added == [MethodCase("toy_calibrator", "rope", "toy_calibrator", "prefill")]
