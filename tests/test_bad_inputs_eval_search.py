"""Issue 13 for evaluation and search: the checks that are not one command line of `BAD_INPUTS`.

The command-line rows are in tests/test_bad_inputs.py. Here: the too-long
refusal of a large KV task in bounded memory (a subprocess under an
address-space cap), bounded tokenising and the chunked task build giving the
same prompts as before, a full disk naming the file being written, the
search's fitness context and the held-out default.
"""

from __future__ import annotations

import errno
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import datasets
import pytest

from evaluation.generation import PromptsTooLongError, fit_to_length, tokenize_and_fit, tokenize_prompts
from evaluation.models import byte_tokenizer
from evaluation.sample_data import NQ_OPEN_ORACLE
from evaluation.tasks import build_task

ROOT = Path(__file__).resolve().parents[1]
NQ = NQ_OPEN_ORACLE


# ----------------------------------------------------------------------------- item 5: bounded length check

BOUNDED = """
import json, resource, sys, time
from pathlib import Path
from evaluation.generation import DecodeSettings, PromptsTooLongError
from evaluation.models import tiny_default
from evaluation.runner import prepare_task

model, tokenizer = tiny_default()
statm = int(Path("/proc/self/statm").read_text().split()[0]) * resource.getpagesize()
cap = statm + int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.perf_counter()
params = {"num_keys": 75, "num_examples": 40, "gold_positions": "all", "seed": 0}
try:
    prepare_task("kv", params, model, tokenizer, DecodeSettings(max_new_tokens=8, max_length=2048))
    outcome = "accepted"
except PromptsTooLongError as err:
    outcome = [err.too_long, err.total, err.limit, err.longest, str(err)]
grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss) * 1024
print(json.dumps({"outcome": outcome, "seconds": time.perf_counter() - start, "rss_growth": grown}))
"""


@pytest.mark.slow  # a fresh interpreter; 3,000 prompts of 6,000 tokens tokenised
def test_a_kv_task_too_long_for_the_model_is_refused_in_bounded_memory():
    """3,000 KV prompts of 75 keys (~6,200 tokens each) for a 2,048-token budget: refused in < 400 MB more.

    Before the fix every prompt was tokenised (with offsets) before the length
    check: ~1.2 MB a prompt, 3.6 GB here, 45 GB for the release's 75-key file at
    every position (37,500 prompts). The refusal now keeps one chunk at a time.
    """
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, "-c", BOUNDED, str(2**30)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=ROOT,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    too_long, total, limit, longest, message = report["outcome"]
    assert (too_long, total, limit) == (3000, 3000, 2040) and longest > 6000
    assert "3000 of 3000 prompts exceed the 2040-token prompt limit" in message and "--truncate middle|left" in message
    assert report["rss_growth"] < 400 * 2**20, report  # ~220 MB: one call of ~87 prompts with offsets


def _mdqa_prompts(num_examples: int = 4) -> datasets.Dataset:
    task = build_task("mdqa", path=str(NQ), num_documents=3, num_examples=num_examples, gold_positions="all", seed=3)
    return task.build()


@pytest.mark.parametrize(("chunk_size", "chars"), [(1, None), (5, None), (256, None), (5, 3000), (256, 3000)])
def test_tokenize_and_fit_gives_the_prompts_of_tokenize_then_fit(chunk_size, chars, monkeypatch):
    """Same tokens, spans and truncation as one tokenizer call followed by `fit_to_length`; same refusal."""
    import evaluation.generation

    tokenizer = byte_tokenizer()
    dataset = _mdqa_prompts()
    prompts, spans = list(dataset["prompt"]), list(dataset["item_spans"])
    whole = tokenize_prompts(tokenizer, prompts, spans, chunk_size=len(prompts))
    lengths = sorted(len(p.input_ids) for p in whole)
    if chars is not None:  # calls of a few prompts (of 1,300-2,500 characters) within each chunk
        monkeypatch.setattr(evaluation.generation, "TOKENIZE_CHARS", chars)
    assert tokenize_prompts(tokenizer, prompts, spans, chunk_size=chunk_size) == whole
    for limit in (None, lengths[-1], lengths[len(lengths) // 2], lengths[0] - 1):
        for truncate in (None, "middle", "left"):
            try:
                expected = fit_to_length(whole, limit, truncate)
            except PromptsTooLongError as err:
                expected = str(err)
            try:
                got = tokenize_and_fit(tokenizer, dataset["prompt"], dataset["item_spans"], limit, truncate, chunk_size)
            except PromptsTooLongError as err:
                got = str(err)
            assert got == expected, (limit, truncate)


def test_task_build_in_chunks_equals_one_build(monkeypatch):
    from evaluation.tasks import base

    task = build_task("kv", num_keys=5, num_examples=4, gold_positions="all", seed=1)
    whole = datasets.Dataset.from_list(list(task.rows()), features=task.features())
    monkeypatch.setattr(base, "BUILD_CHUNK", 7)  # 20 rows: chunks of 7, 7, 6
    chunked = task.build()
    assert chunked.features == whole.features and chunked.to_list() == whole.to_list()


# ----------------------------------------------------------------------------- a full disk names the file


def _full_disk_on(monkeypatch, module, name_part: str) -> None:
    """`open` in `module` gives files whose writes fail with ENOSPC when the file name contains `name_part`."""

    class FullDisk:
        def __init__(self, handle):
            self._handle = handle

        def write(self, text):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        def __getattr__(self, name):
            return getattr(self._handle, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self._handle.close()

    def fake_open(file, mode="r", *args, **kwargs):
        handle = open(file, mode, *args, **kwargs)  # noqa: SIM115  (closed by FullDisk)
        return FullDisk(handle) if name_part in Path(file).name and set(mode) & set("wa") else handle

    monkeypatch.setattr(module, "open", fake_open, raising=False)


EVAL = ["run", "--tasks", "kv", "--num-examples", "2", "--num-keys", "2", "--max-new-tokens", "2", "--no-progress"]


@pytest.mark.parametrize("name", ["records.jsonl", "summary.json", "run.json"])
def test_evaluation_on_a_full_disk_names_the_file(tmp_path, monkeypatch, capsys, name, one_thread):
    import evaluation.results
    import repo_common.atomic
    from evaluation.cli import main

    module = evaluation.results if name == "records.jsonl" else repo_common.atomic
    _full_disk_on(monkeypatch, module, name)
    out = tmp_path / "out"
    code = main([*EVAL, "--no-report", "--out", str(out)])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip() and "no --model" not in line]
    assert code == 2 and len(lines) == 1, lines
    assert f"No space left on device while writing {out / name}; free space" in lines[0]


def test_search_on_a_full_disk_names_the_state_file(tmp_path, monkeypatch, capsys, one_thread):
    import repo_common.atomic
    from search.cli import main

    _full_disk_on(monkeypatch, repo_common.atomic, "s.state.json")
    config = tmp_path / "c.yaml"
    config.write_text(
        "task: {name: kv, num_items: 3, num_examples: 1, max_new_tokens: 1}\nspace: {num_points: 2}\n"
        "ga: {population: 3, parents: 1, generations: 0, mutation_offspring: 1, crossover_offspring: 1}\n"
        "held_out: {num_examples: 0}\n"
    )
    out = tmp_path / "scales" / "s.json"
    code = main(["run", "--config", str(config), "--out", str(out), "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert f"No space left on device while writing {out.with_suffix('')}.state.json; free space" in err


# ----------------------------------------------------------------------------- search: metric and held-out


def test_the_fitness_context_includes_the_metric(one_thread):
    """Same search set, same tokens, another metric: another context, so a resumed search reuses nothing."""
    from evaluation.models import tiny_default
    from search.harness_fitness import HarnessFitness

    model, tokenizer = tiny_default()
    release = HarnessFitness(model, tokenizer, "kv", {"num_keys": 3}, num_examples=1)
    older = HarnessFitness(model, tokenizer, "kv", {"num_keys": 3, "metric": "best_subspan_em"}, num_examples=1)
    assert (release.metric, older.metric) == ("kv_containment", "best_subspan_em")
    assert release.data_sha256 == older.data_sha256 and release.context != older.context
    assert release.describe()["metric"] == "kv_containment"


def test_held_out_default_is_the_papers_500():
    from search.config import HeldOutConfig
    from search.harness_fitness import evaluate_held_out

    default = inspect.signature(evaluate_held_out).parameters["num_examples"].default
    assert default == HeldOutConfig().num_examples == 500


def test_lpes_accepts_scales_alone_and_checks_a_curve_when_there_is_one(tmp_path):
    from evaluation.methods import MethodStack
    from evaluation.methods.lpes.scale_file import ScaleFileError

    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps({"format_version": 1, "num_layers": 2, "scales": [1.0, 1.5]}))
    MethodStack.parse(f"lpes:scale_file={bare}")  # hand-made scales: fine
    linear = {"curve": {"type": "linear", "degree": 1}, "control_points": [[0, 1.0], [1, 1.5]]}
    bare.write_text(json.dumps({"format_version": 1, "num_layers": 2, "scales": [1.0, 1.5], **linear}))
    MethodStack.parse(f"lpes:scale_file={bare}")  # scales on the curve: fine
    bare.write_text(json.dumps({"format_version": 1, "num_layers": 2, "scales": [1.0, 1.4], **linear}))
    with pytest.raises(ScaleFileError, match=r"^lpes: scale file .* scales differ from the linear curve"):
        MethodStack.parse(f"lpes:scale_file={bare}")
    bare.write_text(json.dumps({"format_version": 1, "num_layers": 2, "scales": [1.0, 1.5], "curve": linear["curve"]}))
    with pytest.raises(ScaleFileError, match=r"has curve but lacks \['control_points'\]"):
        MethodStack.parse(f"lpes:scale_file={bare}")
