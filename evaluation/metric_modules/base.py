"""What the metric module scripts (`<name>/<name>.py`) share: their inputs, the per-row loop, the citations.

It defines no `evaluate.Metric` subclass on purpose: `evaluate.load` takes the
first one it finds in a script's namespace, so a shared base class imported into
a script would be loaded in place of the script's own metric.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import datasets

#: The directory holding one directory per metric module.
MODULES_DIR = Path(__file__).resolve().parent

#: The metric modules shipped here (directory names).
MODULE_NAMES = (
    "best_subspan_em",
    "kv_containment",
    "exact_match",
    "substring_match",
    "token_f1",
    "rouge",
    "position_accuracy",
)

ANSWER_INPUTS = """
Args:
    predictions: list of str, one generated answer per example.
    references: list of lists of str (every gold answer of an example), or list of str (one gold answer each).
    per_row: bool, also return the score of every example under "per_row" (default False).
Returns:
    {name}: mean score over the examples, in [0, 1].
Example:
    >>> import evaluate
    >>> from evaluation.metric_modules import module_dir
    >>> metric = evaluate.load(str(module_dir("{name}")))
    >>> metric.compute(predictions=["It was Paris."], references=[["Paris", "Paris, France"]])
"""


def module_dir(name: str) -> Path:
    """The directory of the metric module `name` (what `evaluate.load` takes), or an error listing the names."""
    if name not in MODULE_NAMES:
        raise ValueError(f"unknown metric module {name!r}; choose one of {list(MODULE_NAMES)}")
    return MODULES_DIR / name


def answer_features() -> list[datasets.Features]:
    """Inputs of an answer metric: a prediction and its gold answers, as a list or as one string."""
    prediction = datasets.Value("string")
    return [
        datasets.Features({"predictions": prediction, "references": datasets.List(datasets.Value("string"))}),
        datasets.Features({"predictions": prediction, "references": datasets.Value("string")}),
    ]


def as_answer_lists(references: Sequence[str | Sequence[str]]) -> list[Sequence[str]]:
    """Each example's gold answers as a list (a single string is one answer, never its characters)."""
    return [[answers] if isinstance(answers, str) else answers for answers in references]


def score_rows(
    rule: Callable[[str, Sequence[str]], Any], predictions: Sequence[str], references: Sequence[str | Sequence[str]]
) -> list[Any]:
    """`rule(prediction, answers)` of every example, in order (a float, or ROUGE's dict of three)."""
    if len(predictions) == 0:
        raise ValueError("no predictions to score; pass at least one prediction and its references")
    return [rule(p, a) for p, a in zip(predictions, as_answer_lists(references), strict=True)]


#: The Lost in the Middle paper, source of the MDQA and KV scores.
LIU_2024_CITATION = """\
@article{liu2024lost,
  title={Lost in the Middle: How Language Models Use Long Contexts},
  author={Liu, Nelson F. and Lin, Kevin and Hewitt, John and Paranjape, Ashwin and Bevilacqua, Michele and
          Petroni, Fabio and Liang, Percy},
  journal={Transactions of the Association for Computational Linguistics},
  volume={12},
  pages={157--173},
  year={2024}
}
"""
#: SQuAD, source of the exact-match and token-F1 rules.
SQUAD_CITATION = """\
@inproceedings{rajpurkar2016squad,
  title={{SQuAD}: 100,000+ Questions for Machine Comprehension of Text},
  author={Rajpurkar, Pranav and Zhang, Jian and Lopyrev, Konstantin and Liang, Percy},
  booktitle={Proceedings of the 2016 Conference on Empirical Methods in Natural Language Processing},
  pages={2383--2392},
  year={2016}
}
"""
LOST_IN_THE_MIDDLE_CODE = "https://github.com/nelson-liu/lost-in-the-middle"
SQUAD_PAGE = "https://rajpurkar.github.io/SQuAD-explorer/"


def answer_metric_info(name: str, description: str, citation: str = "", **urls: list[str]):
    """`evaluate.MetricInfo` of an answer metric (prediction vs gold answers); `urls`: codebase_urls=, reference_urls=."""
    import evaluate  # heavy: imports transformers' pipelines; only when a module is built

    return evaluate.MetricInfo(
        description=description,
        citation=citation,
        inputs_description=ANSWER_INPUTS.format(name=name),
        features=answer_features(),
        **urls,
    )


def answer_scores(name: str, rule, predictions, references, per_row: bool) -> dict[str, Any]:
    """What an answer metric's `compute` returns: the mean under `name`, every example's score with `per_row`."""
    scores = score_rows(rule, predictions, references)
    return {name: mean(scores), **({"per_row": scores} if per_row else {})}


def mean(scores: Sequence[float]) -> float:
    """The mean score, summed in order as `evaluation.metrics.accuracy` sums it (same float result)."""
    return sum(scores) / len(scores)
