"""`python -m workflows benchmark-fit`: `fit`'s own tokens/s, MFU and peak memory, RoPE and REPO alternating.

The GPU numbers are in docs/benchmarks.md; here the command's options,
its report and a whole run of the real command on the tiny model (CPU).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from workflows.benchmarks import fit as bench
from workflows.cli import main

REPO = Path(__file__).resolve().parents[1]


def _tiny_configs(root: Path) -> tuple[Path, Path]:
    """The shipped tiny REPO config and its RoPE twin (the 1B configs' pair, at the tiny shape)."""
    repo = REPO / "configs" / "train" / "tiny-repo.yaml"
    config = yaml.safe_load(repo.read_text())
    config["model"]["position"] = "rope"
    rope = root / "tiny-rope.yaml"
    rope.write_text(yaml.safe_dump(config))
    return rope, repo


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--micro_batches", "8,4"], "ascending"),
        (["--micro_batches", "4,x"], "--micro_batches"),
        (["--activation_checkpointing", "maybe"], "not false, true, every_K, attention or mlp"),
        (["--switches", "compile+turbo"], "switches joined by '+' from compile, chunked_loss, fused_adamw, fsdp2"),
        (["--switches", "eager+compile"], "a variant is 'eager' or switches"),
        (["--steps", "3", "--warmup", "3"], "leaves no timed step"),
        (["--steps", "0"], "option --steps: expected a positive integer"),
        (["--rope_config", "missing.yaml"], "no such file"),
    ],
)
def test_bad_options_are_one_line_refusals(argv, words, tmp_path, capsys):
    assert main(["benchmark-fit", "--out", str(tmp_path / "out"), *argv]) == 2
    error = capsys.readouterr().err.strip()
    assert words in error and "\n" not in error and not (tmp_path / "out").exists()


def test_a_users_folder_is_not_written_into(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("mine")
    assert main(["benchmark-fit", "--out", str(tmp_path)]) == 2 and "notes.txt" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def _record(variant, method, micro, rate=None):
    status = "ok" if rate else "out of memory"
    return {"variant": variant, "method": method, "activation_checkpointing": False, "micro_batch": micro,
            "status": status, "tokens_per_s": rate, "wall_seconds": 1.0}  # fmt: skip


def test_the_ratio_pairs_rope_and_repo_of_one_setting_and_each_variant_with_eager():
    records = [
        _record("eager", "rope", 4, 100.0), _record("eager", "repo", 4, 98.0),
        _record("eager", "rope", 8, 110.0), _record("eager", "repo", 8),
        _record("compile", "rope", 4, 130.0), _record("compile", "repo", 4, 125.0),
    ]  # fmt: skip
    assert bench.ratios(records) == {
        ("eager", "false", 4): pytest.approx(100 / 98),
        ("compile", "false", 4): pytest.approx(130 / 125),
    }
    assert bench.speed_ups(records) == {
        ("compile", "rope", "false", 4): pytest.approx(1.30),
        ("compile", "repo", "false", 4): pytest.approx(125 / 98),
    }
    assert "| compile | rope | false | 4 | 1.300 |" in bench.markdown(records, bench.FitBenchmark())


def test_a_variant_is_the_eager_engine_plus_its_switches():
    eager = dict(zip(bench.variant_overrides("eager")[::2], bench.variant_overrides("eager")[1::2]))
    assert eager == {"--model.compile": "false", "--model.loss_chunk_tokens": "0", "--model.fused_adamw": "false"}
    both = bench.variant_overrides("compile+fsdp2")
    values = {}
    for flag, value in zip(both[::2], both[1::2]):
        values[flag] = value  # the later value of a flag wins, as in the parser
    assert values["--model.compile"] == "true" and "ModelParallelStrategy" in values["--trainer.strategy"]


def test_fit_is_given_the_benchmarks_overrides_after_the_config_and_the_users_last(tmp_path):
    options = bench.FitBenchmark(fit_args="--trainer.accelerator cpu", out=str(tmp_path / "o"))
    argv = bench.fit_argv("c.yaml", tmp_path, True, 4, options, "chunked_loss")
    assert argv[1:6] == ["-m", "repo_train", "fit", "--config", "c.yaml"]
    values = dict(zip(argv[::2], argv[1::2]))
    assert values["--model.init_from"] == "null" and values["--model.activation_checkpointing"] == "true"
    assert values["--data.micro_batch_size"] == "4" and values["--data.global_batch_size"] == "16"
    assert argv[argv.index("--model.loss_chunk_tokens", argv.index("--model.loss_chunk_tokens") + 1) + 1] == "4096"
    assert argv[-2:] == ["--trainer.accelerator", "cpu"]


@pytest.mark.slow  # six `python -m repo_train fit` processes on the tiny model (~60 s)
def test_a_cpu_rehearsal_measures_both_methods_and_stops_a_setting_that_fails(tmp_path, capsys):
    rope, repo = _tiny_configs(tmp_path)
    out = tmp_path / "bench"
    common = ["--rope_config", str(rope), "--repo_config", str(repo), "--steps", "3", "--warmup", "1",
              "--accumulation", "1", "--activation_checkpointing", "false"]  # fmt: skip
    variants = ["--switches", "eager,chunked_loss+fused_adamw"]
    assert main(["benchmark-fit", "--out", str(out), "--micro_batches", "2", *variants, *common]) == 0
    report = json.loads((out / "report.json").read_text())
    runs = report["runs"]
    assert [(r["variant"], r["method"], r["status"]) for r in runs] == [
        ("eager", "rope", "ok"), ("eager", "repo", "ok"),
        ("chunked_loss+fused_adamw", "rope", "ok"), ("chunked_loss+fused_adamw", "repo", "ok"),
    ], runs  # fmt: skip
    assert all(r["tokens_per_s"] > 0 and r["timed_steps"] == 2 for r in runs)
    text = (out / "report.md").read_text()
    assert "| eager | false | 2 |" in text  # the REPO/RoPE ratio row
    assert "| chunked_loss+fused_adamw | rope | false | 2 |" in text  # its speed against eager
    # a failing micro batch ends its setting: the larger one is not tried
    failing = tmp_path / "failing"
    code = main(
        ["benchmark-fit", "--out", str(failing), "--micro_batches", "1,2", "--fit_args", "--model.lr -1", *common]
    )
    runs = json.loads((failing / "report.json").read_text())["runs"]
    assert code == 1 and [(r["micro_batch"], r["status"]) for r in runs] == [(1, "failed (2)"), (1, "failed (2)")]
    assert all(r["variant"] == "eager" for r in runs)
    assert "learning rate must be > 0" in runs[0]["last_lines"][-1]  # the report says why
