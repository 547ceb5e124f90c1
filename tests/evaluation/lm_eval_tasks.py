"""A tiny local lm-eval task set for the `repo-train` model's tests: five documents read by three request types.

`tiny_gen` (generate_until, greedy, stops at a newline), `tiny_mc` (multiple choice: loglikelihood) and
`tiny_roll` (loglikelihood_rolling) over one jsonl file, loaded by `datasets`' json builder, no network.
"""

from __future__ import annotations

import json
from pathlib import Path

TASKS = ("tiny_gen", "tiny_mc", "tiny_roll")

_BODIES = {
    "tiny_gen": (
        'output_type: generate_until\ndoc_to_text: "{{context}}"\ndoc_to_target: "{{answer}}"\n'
        'generation_kwargs:\n  until: ["\\n"]\n  max_gen_toks: 8\n  do_sample: false\n'
        "metric_list:\n  - metric: exact_match\n    aggregation: mean\n    higher_is_better: true\n"
    ),
    "tiny_mc": (
        'output_type: multiple_choice\ndoc_to_text: "{{context}}"\ndoc_to_choice: "{{choices}}"\n'
        'doc_to_target: "{{label}}"\nmetric_list:\n  - metric: acc\n    aggregation: mean\n    higher_is_better: true\n'
    ),
    "tiny_roll": (
        'output_type: loglikelihood_rolling\ndoc_to_text: ""\ndoc_to_target: "{{text}}"\n'
        "metric_list:\n  - metric: word_perplexity\n    aggregation: weighted_perplexity\n"
        "    higher_is_better: false\n"
    ),
}


def write_tasks(folder: Path, documents: int = 5) -> Path:
    """The three task YAMLs and their jsonl under `folder` (lm-eval's `include_path`)."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = [
        {
            "context": f"Document {i}: the key of box {i} is {7 * i + 3}. Question: the key of box {i}? Answer:",
            "answer": f" {7 * i + 3}",
            "choices": [" yes", " no", " maybe so"],
            "label": i % 3,
            "text": f"Box {i} holds key {7 * i + 3}; the boxes are stacked in a row of {documents}.",
        }
        for i in range(documents)
    ]
    data = folder / "docs.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    source = f"dataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {data}\ntest_split: test\n"
    for name, body in _BODIES.items():
        (folder / f"{name}.yaml").write_text(f"task: {name}\n{source}{body}")
    return folder


def responses(results: dict) -> dict[str, list]:
    """Each task's per-document responses (`resps`) of a `simple_evaluate(..., log_samples=True)` result."""
    return {task: [sample["resps"] for sample in samples] for task, samples in results["samples"].items()}


def loglikelihoods(results: dict) -> list[float]:
    """Every log-likelihood number in the results (multiple choice and rolling), in document order."""
    values = []
    for task, per_doc in responses(results).items():
        if task == "tiny_gen":
            continue
        for doc in per_doc:
            for resp in doc:
                first = resp[0]
                values.append(float(first[0] if isinstance(first, (list, tuple)) else first))
    return values


def generations(results: dict) -> list[str]:
    return [doc[0][0] for doc in responses(results).get("tiny_gen", [])]
