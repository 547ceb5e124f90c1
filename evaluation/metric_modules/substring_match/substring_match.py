"""Verbatim, case-sensitive containment of a gold answer in the prediction, as an `evaluate` metric."""

import evaluate

from evaluation.metric_modules import ANSWER_INPUTS, answer_features, mean, score_rows
from evaluation.metrics import substring_match

# No published source: a strict variant of the release's KV containment, defined by this project.
_CITATION = ""

_DESCRIPTION = """\
1 when a gold answer occurs verbatim in the prediction (case-sensitive, no normalisation), else 0; the mean over
examples. Stricter than the Lost in the Middle release's KV containment (which ignores case); useful for exact
strings such as UUIDs.
"""


class SubstringMatch(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=ANSWER_INPUTS.format(name="substring_match"),
            features=answer_features(),
        )

    def _compute(self, predictions, references, per_row=False):
        scores = score_rows(substring_match, predictions, references)
        return {"substring_match": mean(scores), **({"per_row": scores} if per_row else {})}
