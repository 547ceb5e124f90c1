"""The benchmark scripts' helpers: alternation order, warm-up, ratio arithmetic (fake clocks, no timing), and the
memory trace (tensors of known sizes), the options the benchmarks share and a fresh-process measurement."""

from dataclasses import fields

import pytest
import torch
from torch.profiler import record_function
from workflow_commands import command_module, parse_args

from workflows.benchmarking import (
    Alternation,
    alternate,
    comparison,
    interleave,
    summary,
    trace_allocations,
)
from workflows.benchmarks import found_in_middle_measure as fim
from workflows.benchmarks import repo_overhead_measure as script
from workflows.benchmarks.options import BenchmarkOptions, RandomModelOptions
from workflows.cli import COMMANDS, TYPED_COMMANDS


def _fake(name: str, seconds: list[float], log: list[str]):
    """A callable that logs its name and returns the next of `seconds`."""
    values = iter(seconds)

    def run() -> float:
        log.append(name)
        return next(values)

    return run


def test_runs_alternate_and_warm_up_pairs_are_dropped():
    log: list[str] = []
    result = alternate(_fake("a", [9.0, 2.0, 4.0, 5.0], log), _fake("b", [9.0, 3.0, 2.0, 10.0], log), pairs=3, warmup=1)
    assert log == ["a", "b"] * 4
    assert result == Alternation(a=[2.0, 4.0, 5.0], b=[3.0, 2.0, 10.0])


def test_ratios_are_b_over_a_per_pair():
    result = Alternation(a=[2.0, 4.0, 5.0], b=[3.0, 2.0, 10.0])
    assert result.ratios == [1.5, 0.5, 2.0]
    assert result.median_ratio == 1.5
    assert result.best_ratio == 1.0  # min(b) / min(a) = 2 / 2
    assert Alternation(a=[1.0, 4.0], b=[3.0, 4.0]).median_ratio == 2.0  # even count: mean of the middle two


def test_summary_reports_medians_and_the_median_ratio():
    text = summary(Alternation(a=[0.002, 0.004, 0.005], b=[0.003, 0.002, 0.010]), "rope", "repo", unit="ms")
    assert text.splitlines() == [
        "rope median 4.000 ms (min 2.000, max 5.000, n=3)",
        "repo median 3.000 ms (min 2.000, max 10.000, n=3)",
        "repo / rope time: median 1.500 (per pair 0.500-2.000)",
    ]


def test_no_timed_pair_is_an_error():
    with pytest.raises(ValueError, match="pairs >= 1"):
        alternate(float, float, pairs=0)


def test_interleave_rotates_the_order_each_round_and_drops_warm_up_rounds():
    log: list[str] = []
    runs = {name: _fake(name, [9.0, 1.0, 2.0, 3.0], log) for name in ("a", "b", "c")}
    times = interleave(runs, rounds=3, warmup=1)
    assert log == ["a", "b", "c", "b", "c", "a", "c", "a", "b", "a", "b", "c"]
    assert times == {"a": [1.0, 2.0, 3.0], "b": [1.0, 2.0, 3.0], "c": [1.0, 2.0, 3.0]}


def test_interleave_refuses_no_rounds():
    with pytest.raises(ValueError, match="rounds >= 1"):
        interleave({"a": float}, rounds=0)


def test_comparison_prints_each_variant_once_and_each_pair_ratio():
    times = {"hf": [0.002, 0.004], "rope": [0.002, 0.005], "repo": [0.003, 0.005]}
    assert comparison(times, [("hf", "rope"), ("rope", "repo")], unit="ms").splitlines() == [
        "hf   median 3.000 ms (min 2.000, max 4.000, n=2)",
        "rope median 3.500 ms (min 2.000, max 5.000, n=2)",
        "repo median 4.000 ms (min 3.000, max 5.000, n=2)",
        "rope / hf time: median 1.125 (per pair 1.000-1.250)",
        "repo / rope time: median 1.250 (per pair 1.000-1.500)",
    ]


def test_trace_allocations_follows_allocations_and_frees_from_zero():
    kept = []

    def run():
        first = torch.empty(1_000_000, dtype=torch.uint8)
        second = torch.empty(2_000_000, dtype=torch.uint8)
        del first
        with record_function("third"):
            kept.append(torch.empty(500_000, dtype=torch.uint8))  # still held when the trace ends
        del second

    trace = trace_allocations(run)
    assert trace.peak == 3_000_000
    assert trace.before("third") == 2_000_000
    assert trace.totals[-1] == 500_000
    # A second trace starts from 0 again although the first one's tensor is still allocated.
    again = trace_allocations(lambda: torch.empty(100_000, dtype=torch.uint8))
    assert again.peak == 100_000
    with pytest.raises(KeyError, match="no record_function range 'backward'"):
        trace.before("backward")


def test_repo_overhead_benchmark_prints_every_ratio_on_a_tiny_shape(capsys):
    args = ["--hidden", "32", "--layers", "2", "--heads", "2", "--seq_len", "16", "--vocab", "64"]
    models = script.build_models(parse_args("benchmark-repo-overhead", args))
    ids = torch.randint(2, 64, (2, 16))
    with torch.no_grad():  # HF and RoPE share every weight and RoPE runs HF's arithmetic: the same logits
        assert torch.equal(models["HF"](ids).logits, models["RoPE"](ids).logits)
    script.main(parse_args("benchmark-repo-overhead", [*args, "--rounds", "2", "--threads", "1", "--clock", "cpu"]))
    out = capsys.readouterr().out
    for line in ("RoPE / HF time: median", "REPO / RoPE time: median", "model FLOPs ratio REPO/RoPE"):
        assert line in out
    assert "n=2)" in out and "peak: RoPE" in out and "held when backward starts: RoPE" in out


def test_the_benchmarks_share_one_options_base():
    """`--rounds` and `--threads` (and the random model's shape) are declared once, in `workflows.benchmarks.options`;
    a benchmark redeclares a field only for its own default or help."""
    shared = {item.name for item in fields(RandomModelOptions)}
    extending = {}
    for command in COMMANDS:
        if command.startswith("benchmark-"):
            assert command in TYPED_COMMANDS
            extending[command] = issubclass(command_module(command).OPTIONS, BenchmarkOptions)
    # fit runs `fit` itself, search's rounds are its seeds, startup times fresh interpreters: the rest extend it
    assert {command for command, extends in extending.items() if not extends} == {
        "benchmark-fit",
        "benchmark-search",
        "benchmark-startup",
    }
    for command in ("benchmark-calibrators", "benchmark-fim", "benchmark-harness", "benchmark-repo-overhead"):
        options = command_module(command).OPTIONS
        assert issubclass(options, RandomModelOptions) and shared <= {item.name for item in fields(options)}
    assert script.RepoOverheadBenchmark().layers == 6 and RandomModelOptions().layers == 4  # its own default


@pytest.mark.slow  # a fresh interpreter loads torch and generates (45 s on two cores at load 11, 2026-12-07)
def test_the_fim_benchmark_measures_a_spec_in_a_fresh_process():
    """The fresh process gets the options and the spec as JSON on its standard input (no hidden option)."""
    options = fim.FimBenchmark(hidden=32, layers=2, heads=2, docs=2, examples=1, new_tokens=2, threads=1)
    run = fim.measure_in_child(options, "baseline")
    assert run["seconds"] > 0 and run["peak_above_load_mb"] >= 0
