"""Verbatim, case-sensitive containment of a gold answer in the prediction, as an `evaluate` metric."""

import evaluate

from evaluation.metric_modules.base import answer_metric_info, answer_scores
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
        return answer_metric_info("substring_match", _DESCRIPTION, _CITATION)

    def _compute(self, predictions, references, per_row=False):
        return answer_scores("substring_match", substring_match, predictions, references, per_row)
