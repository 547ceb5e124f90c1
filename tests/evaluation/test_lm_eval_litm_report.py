"""`python -m evaluation lm-eval report`: lm-eval's per-sample output of the Lost-in-the-Middle tasks read into the
project's summary (the same CIs, paired tests and verdicts as `evaluation run`'s), from files in lm-eval's layout."""

from __future__ import annotations

import json

from evaluation.cli import main as evaluation_main
from evaluation.results import build_summary


def write_samples(folder, scores: dict[int, list[float]], family: str = "mdqa") -> list[dict]:
    """lm-eval's layout: OUT/<model>/samples_<task>_<time>.jsonl, one line per document with its `doc`."""
    model_dir = folder / "models__m"
    model_dir.mkdir(parents=True)
    metric = "kv_containment" if family == "kv" else "best_subspan_em"
    records = []
    for position, row in scores.items():
        lines = []
        for question, score in enumerate(row):
            doc = {
                "id": f"q{question}-pos{position}",
                "example_id": f"q{question}",
                "gold_position": position,
                "num_positions": 3,
                "prompt": "P",
                "answers": ["a"],
                "family": family,
            }
            lines.append({"doc_id": question, "doc": doc, "filtered_resps": ["a" if score else "b"], metric: score})
            records.append(
                {
                    **doc,
                    "task": family,
                    "score": score,
                    "prediction": "a" if score else "b",
                    "prompt_tokens": None,
                    "truncated": False,
                }
            )
        path = model_dir / f"samples_litm_{family}_k3_pos{position}_2026-12-07T10-00-00.jsonl"
        path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    (model_dir / "results_2026-12-07T10-00-00.json").write_text(json.dumps({"config": {"model": "hf"}}))
    return records


def test_the_summary_equals_build_summary_of_the_same_records(tmp_path, capsys):
    base = {0: [1.0] * 8, 1: [1.0, 0.0] * 4, 2: [1.0] * 8}
    method = {0: [1.0] * 8, 1: [1.0] * 8, 2: [1.0] * 8}
    ours_base = write_samples(tmp_path / "hf", base)
    ours_method = write_samples(tmp_path / "pi", method)
    out = tmp_path / "report"
    argv = ["lm-eval", "report", "--out", str(out), "--runs", f"baseline={tmp_path / 'hf'}"]
    assert evaluation_main([*argv, "--runs", f"pi={tmp_path / 'pi'}"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    records = [{**r, "method": "baseline"} for r in ours_base] + [{**r, "method": "pi"} for r in ours_method]
    expected = build_summary(records, summary["model"], summary["tasks"], ["baseline", "pi"])
    assert summary["results"] == json.loads(json.dumps(expected["results"]))
    vs = summary["results"]["mdqa"]["pi"]["vs_baseline"]
    assert vs["mean_diff"] > 0 and vs["verdict"]
    assert (out / "report.md").is_file() and "| pi |" in (out / "report.md").read_text()


def test_bad_runs_are_one_line(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    for runs in (["nothing"], [f"baseline={tmp_path / 'missing'}"], [f"baseline={empty}"]):
        argv = ["lm-eval", "report", "--out", str(tmp_path / "o"), *(x for r in runs for x in ("--runs", r))]
        assert evaluation_main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "Traceback" not in err, err
