"""The `evaluate` metric modules: loaded by path, offline, they score as the pure functions of evaluation.metrics."""

from __future__ import annotations

import itertools
import json
import os
import socket
import subprocess
import sys

import evaluate
import pytest
from test_eval_metrics import ADVERSARIAL

from evaluation.metric_modules import MODULE_NAMES, MODULES_DIR, module_dir
from evaluation.metrics import METRICS, ROUGE_TYPES, get_metric, metric_module, rouge_scores, score_batch
from evaluation.position_metrics import accuracy_by_position, summarize_positions

#: (prediction, gold answers) pairs: the hand-computed cases of test_eval_metrics, then adversarial Unicode pairs.
CASES = [
    ("It was Wilhelm Conrad Röntgen, in 1901.", ["Wilhelm Conrad Röntgen"]),
    ("Röntgen", ["Marie Curie", "Röntgen"]),
    ("the Eiffel Tower", ["Eiffel-Tower"]),
    ("The Eiffel-Tower!", ["eiffeltower"]),
    ("It is in Paris.", ["Paris"]),
    ("it is in paris", ["Paris"]),
    ("The cat sat quietly on the mat", ["a cat sat on the hat", "dog"]),
    ("", ["the"]),
    ('The value is "9F1C-4E2A".', ["9f1c-4e2a"]),
    ("9f1c4e2a", ["9f1c-4e2a"]),
    ("B", ["A"]),
    ("the cat sat", ["the cat on the mat", "dogs bark"]),
    *[(p, [a]) for p, a in itertools.islice(itertools.product(ADVERSARIAL, repeat=2), 0, None, 7)],
]
PREDICTIONS = [p for p, _ in CASES]
ANSWERS = [a for _, a in CASES]


def test_every_module_directory_is_listed_and_holds_its_script() -> None:
    on_disk = sorted(p.name for p in MODULES_DIR.iterdir() if p.is_dir() and p.name != "__pycache__")
    assert on_disk == sorted(MODULE_NAMES)
    for name in MODULE_NAMES:
        assert (module_dir(name) / f"{name}.py").is_file()
    with pytest.raises(ValueError, match=r"unknown metric module 'bleu'; choose one of"):
        module_dir("bleu")


@pytest.mark.parametrize("name", sorted(METRICS))
def test_module_scores_equal_the_pure_function(name: str) -> None:
    pure = [get_metric(name)(p, a) for p, a in CASES]
    assert 0 < sum(pure) < len(pure)  # the cases separate hits from misses for every metric
    assert score_batch(name, PREDICTIONS, ANSWERS) == pure  # bit-identical: the module calls the function


@pytest.mark.parametrize("name", [n for n in MODULE_NAMES if n in METRICS])
def test_user_loads_a_module_by_path_and_computes(name: str) -> None:
    metric = evaluate.load(str(module_dir(name)))
    pure = [get_metric(name)(p, a) for p, a in CASES]
    result = metric.compute(predictions=PREDICTIONS, references=ANSWERS)
    assert result == {name: sum(pure) / len(pure)}
    assert metric.compute(predictions=PREDICTIONS, references=ANSWERS, per_row=True)["per_row"] == pure
    # one gold answer per example may be a plain string (a single answer, not a list of characters)
    single = metric.compute(predictions=["It is in Paris.", "no"], references=["Paris", "yes"], per_row=True)
    assert single["per_row"] == [get_metric(name)("It is in Paris.", ["Paris"]), get_metric(name)("no", ["yes"])]
    assert metric.citation == metric_module(name).citation and name in metric.inputs_description


def test_rouge_module_gives_all_three_types() -> None:
    metric = evaluate.load(str(module_dir("rouge")))
    rows = [rouge_scores(p, a) for p, a in CASES]
    result = metric.compute(predictions=PREDICTIONS, references=ANSWERS, per_row=True)
    assert result["per_row"] == rows
    for kind in ROUGE_TYPES:
        assert result[kind] == sum(row[kind] for row in rows) / len(rows)
    # hand case of test_eval_metrics: "the cat sat" vs "the cat on the mat": R1 = RL = 0.5, R2 = 1/3
    stemmed = metric.compute(predictions=["the cat sat"], references=[["the cat on the mat"]], use_stemmer=True)
    assert stemmed == pytest.approx({"rouge1": 0.5, "rouge2": 1 / 3, "rougeL": 0.5}, rel=1e-12)


def test_position_module_summarizes_the_curve() -> None:
    # two questions, three positions; the middle is missed for both: accuracy 1, 0, 1 -> a perfect U (rho = 100)
    predictions = ["Paris", "Rome", "It is Paris.", "paris!", "Oslo", "PARIS"]
    metric = evaluate.load(str(module_dir("position_accuracy")))
    result = metric.compute(
        predictions=predictions,
        references=[["Paris"]] * 6,
        gold_position=[0, 1, 2, 0, 1, 2],
        num_positions=[3] * 6,
        example_id=["q1"] * 3 + ["q2"] * 3,
    )
    assert result["accuracy_by_position"] == {0: 1.0, 1: 0.0, 2: 1.0}
    assert result["accuracy"] == pytest.approx(4 / 6, rel=1e-12)
    assert result["rho"] == pytest.approx(100.0, rel=1e-12)
    assert result["middle_minus_edges"] == -1.0 and result["worst_accuracy"] == 0.0
    assert (result["num_positions"], result["num_examples"]) == (3, 2)


def test_position_module_equals_position_metrics_with_another_answer_metric() -> None:
    rows = [(p, a, i % 4, f"q{i // 4}") for i, (p, a) in enumerate(CASES[:32])]
    metric = evaluate.load(str(module_dir("position_accuracy")))
    result = metric.compute(
        predictions=[r[0] for r in rows],
        references=[r[1] for r in rows],
        gold_position=[r[2] for r in rows],
        num_positions=[4] * len(rows),
        example_id=[r[3] for r in rows],
        metric="kv_containment",
        per_row=True,
    )
    scores = [METRICS["kv_containment"](p, a) for p, a, _, _ in rows]
    curve = accuracy_by_position({"gold_position": g, "score": s} for (_, _, g, _), s in zip(rows, scores))
    assert result["per_row"] == scores and result["accuracy_by_position"] == curve
    summary = summarize_positions(curve, 4)
    for key, value in summary.items():
        assert result[key] == pytest.approx(value, rel=1e-12, nan_ok=True)
    assert len(set(curve.values())) > 1  # a curve with a shape, not a constant


def test_score_batch_checks_its_inputs_and_caches_the_module() -> None:
    assert metric_module("kv_containment") is metric_module("kv_containment")
    assert score_batch("kv_containment", [], []) == []
    with pytest.raises(ValueError, match=r"2 predictions but 1 answer lists"):
        score_batch("kv_containment", ["a", "b"], [["a"]])
    with pytest.raises(ValueError, match=r"unknown metric 'bleu'; choose one of"):
        score_batch("bleu", ["a"], [["a"]])
    with pytest.raises(ValueError, match=r"answers is empty"):  # the pure function's own check, through evaluate
        score_batch("token_f1", ["a"], [[]])


#: Run in a fresh interpreter: refuse (and count) every connection and name lookup, then load every module and score.
_OFFLINE_CHILD = """
import json, socket
attempts = []
def refuse(*args, **kwargs):
    attempts.append(repr(args))
    raise OSError("network access attempted")
socket.socket.connect = lambda self, address: refuse(address)
socket.socket.connect_ex = lambda self, address: refuse(address)
socket.getaddrinfo = refuse
from evaluation.metric_modules import MODULE_NAMES
from evaluation.metrics import metric_module, score_batch
for name in MODULE_NAMES:
    metric_module(name)
scores = score_batch("best_subspan_em", ["It is Paris.", "Rome"], [["paris"], ["Oslo"]])
print(json.dumps({"attempts": attempts, "scores": scores}))
"""


def test_loading_makes_no_network_call(monkeypatch) -> None:
    """Loading every module again (no HF_*_OFFLINE variables) and scoring neither connects nor looks up a name."""
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "HF_EVALUATE_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    attempts: list[object] = []

    def refuse(*args, **kwargs):
        attempts.append(args)
        raise OSError("network access attempted in an offline test")

    monkeypatch.setattr(socket.socket, "connect", lambda self, address: refuse(address))
    monkeypatch.setattr(socket.socket, "connect_ex", lambda self, address: refuse(address))
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    metric_module.cache_clear()
    for name in MODULE_NAMES:
        metric_module(name)
    assert score_batch("kv_containment", ["It is 9F1C."], [["9f1c"]]) == [1.0]
    assert attempts == []


@pytest.mark.slow
def test_fresh_interpreter_and_hf_cache_load_offline(tmp_path) -> None:
    """A new process, an empty HF cache, no HF_* variables: every module loads and scores without a connection."""
    offline = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "HF_EVALUATE_OFFLINE", "TRANSFORMERS_OFFLINE")
    env = {k: v for k, v in os.environ.items() if k not in offline and not k.startswith("HF_")}
    env["HF_HOME"] = str(tmp_path / "hf")
    command = [sys.executable, "-c", _OFFLINE_CHILD]
    done = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"attempts": [], "scores": [1.0, 0.0]}
    copied = sorted(p.stem for p in (tmp_path / "hf" / "modules").rglob("*.py") if p.name != "__init__.py")
    assert copied == sorted(MODULE_NAMES)  # loaded through the fresh cache, not an earlier copy
