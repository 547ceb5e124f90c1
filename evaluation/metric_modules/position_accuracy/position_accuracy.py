"""Accuracy by gold position and the curve's shape summaries (ρ, middle − edges), as an `evaluate` metric."""

import datasets
import evaluate

from evaluation.metric_modules.base import LIU_2024_CITATION, mean, score_rows
from evaluation.metrics import get_metric
from evaluation.position_metrics import accuracy_by_position, summarize_positions

_CITATION = (
    LIU_2024_CITATION
    + """\
@misc{zehle_caliope,
  title={Can Calibration of Positional Encodings Enhance Long Context Utilization?},
  author={Zehle and A{\\ss}enmacher},
  note={CALIOPE; defines the U-shape index rho}
}
"""
)

_DESCRIPTION = """\
Scores every example with an answer metric (best-subspan EM by default), then summarizes the scores by the
position of the relevant item in the context, as a lost-in-the-middle evaluation does (Liu et al.): accuracy at
each gold position, their mean, the worst position, the mean of the interior positions minus the mean of the two
edge positions (negative: a lost middle), and CALIOPE's U-shape index rho = 100 x Pearson correlation between
edge-closeness |t - T/2| / (T/2) and accuracy. The numbers are those of `python -m evaluation run`'s summary;
their confidence intervals (a bootstrap over questions, `example_id`) are evaluation.statistics' job.
"""

_INPUTS = """
Args:
    predictions: list of str, one generated answer per row.
    references: list of lists of str (every gold answer of a row), or list of str (one gold answer each).
    gold_position: list of int, 0-based position of the relevant item in each row's context.
    num_positions: list of int, the number of items in each row's context (the largest is used, as the harness does).
    example_id: list of str, the question each row asks (one question at k positions is k rows).
    metric: str, the answer metric of evaluation.metrics.METRICS (default "best_subspan_em").
    per_row: bool, also return every row's score under "per_row" (default False).
Returns:
    accuracy (mean over rows), accuracy_by_position {position: accuracy}, mean_accuracy (over positions), rho,
    worst_accuracy, middle_minus_edges, num_positions, num_examples.
"""


class PositionAccuracy(evaluate.Metric):
    def _info(self):
        row = {
            "predictions": datasets.Value("string"),
            "gold_position": datasets.Value("int64"),
            "num_positions": datasets.Value("int64"),
            "example_id": datasets.Value("string"),
        }
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_INPUTS,
            features=[
                datasets.Features({**row, "references": datasets.List(datasets.Value("string"))}),
                datasets.Features({**row, "references": datasets.Value("string")}),
            ],
            codebase_urls=["https://github.com/nelson-liu/lost-in-the-middle"],
        )

    def _compute(
        self, predictions, references, gold_position, num_positions, example_id, metric="best_subspan_em", per_row=False
    ):
        scores = score_rows(get_metric(metric), predictions, references)
        curve = accuracy_by_position({"gold_position": p, "score": s} for p, s in zip(gold_position, scores))
        k = max(num_positions)
        return {
            "accuracy": mean(scores),
            "accuracy_by_position": curve,
            **summarize_positions(curve, k),
            "num_positions": k,
            "num_examples": len(set(example_id)),
            **({"per_row": scores} if per_row else {}),
        }
