"""Best-subspan exact match, the multi-document QA score of the Lost in the Middle release, as an `evaluate` metric."""

import evaluate

from evaluation.metric_modules.base import LIU_2024_CITATION, LOST_IN_THE_MIDDLE_CODE, answer_metric_info, answer_scores
from evaluation.metrics import best_subspan_em

_CITATION = LIU_2024_CITATION

_DESCRIPTION = """\
1 when any gold answer, normalized, is a substring of the normalized prediction, else 0; the mean over examples.
Normalisation as in the release (src/lost_in_the_middle/metrics.py): lower-case, delete ASCII punctuation, drop
the whole words a/an/the with the `regex` module's word boundaries, collapse whitespace. A gold answer that
normalizes to "" (e.g. "The") matches every prediction, as in the release.
"""


class BestSubspanEm(evaluate.Metric):
    def _info(self):
        return answer_metric_info("best_subspan_em", _DESCRIPTION, _CITATION, codebase_urls=[LOST_IN_THE_MIDDLE_CODE])

    def _compute(self, predictions, references, per_row=False):
        return answer_scores("best_subspan_em", best_subspan_em, predictions, references, per_row)
