"""The cross-check against lm-evaluation-harness on the real model: the same token ids, the same continuations.

Four MDQA prompts of the packaged sample (two questions, gold first and last of
three documents), one left-padded batch of four, 16 new tokens: the whole path
of `python -m workflows crosscheck-lm-eval` (options, harness prompts, lm-eval's
`generate_until` on the same strings, the report) with no timing rounds.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workflows.cli import main

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def crosscheck(lm_eval_installed):
    """The command's report of `argv` (it exits 0 and writes the report to --out)."""

    def run(argv: list[str]) -> dict:
        assert main(["crosscheck-lm-eval", *argv]) == 0
        return json.loads(Path(argv[argv.index("--out") + 1]).read_text())

    return run


def test_lm_eval_reads_the_same_tokens_and_continues_the_same_text(crosscheck, real_model_dir, tmp_path):
    out = tmp_path / "crosscheck.json"
    argv = ["--model", str(real_model_dir), "--num_documents", "3", "--num_examples", "2", "--gold_positions", "0,2",
            "--max_new_tokens", "16", "--batch_size", "4", "--repeats", "0", "--out", str(out)]  # fmt: skip
    report = crosscheck(argv)

    assert report["command"] == "python -m workflows crosscheck-lm-eval"
    assert report["prompts"]["count"] == 4
    assert report["prompts"]["tokens_min"] < report["prompts"]["tokens_max"]  # the batch is left-padded
    assert report["tokenization"]["identical"], report["tokenization"]["differences"]
    assert report["tokenization"]["lm_eval_batches_fed_identical_ids"]
    assert report["batches"]["ours"] == [[0, 1, 2, 3]] and report["batches"]["same_composition"]
    assert report["match"]["rate"] == 1.0, report["match"]["mismatches"]
    assert all(row["ours"] == row["lm_eval"] for row in report["outputs"])
    assert any(row["our_stop_reason"] == "stop" for row in report["outputs"])  # cut at "\n" on both sides
    assert report["environment"]["dtype"] == "float32" and report["environment"]["attn_implementation"] == "sdpa"
    assert report["timing"] is None


def test_lm_eval_gives_the_gold_answers_the_same_log_likelihood(crosscheck, real_model_dir, tmp_path):
    """--score gold_loglik: lm-eval's `loglikelihood` on the same (prompt, gold answer) strings, chat template on
    (the gold answer then starts the assistant's turn): the same token ids, sums equal to float noise."""
    out = tmp_path / "crosscheck.json"
    argv = ["--model", str(real_model_dir), "--num_documents", "3", "--num_examples", "2", "--gold_positions", "0,2",
            "--batch_size", "4", "--chat_template", "true", "--score", "gold_loglik", "--repeats", "0",
            "--out", str(out)]  # fmt: skip
    report = crosscheck(argv)

    assert report["settings"]["score"] == "gold_loglik"
    assert report["tokenization"]["identical"], report["tokenization"]["differences"]
    match = report["match"]
    assert match["total"] == 4 and match["rate"] == 1.0 and match["greedy_flags_equal"] == 4, match
    assert all(row["ours"] < 0 and row["gold_tokens"] >= 1 for row in report["outputs"])
    assert report["timing"] is None
