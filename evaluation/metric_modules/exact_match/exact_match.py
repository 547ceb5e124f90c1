"""SQuAD exact match (the best over the gold answers) as an `evaluate` metric."""

import evaluate

from evaluation.metric_modules.base import SQUAD_CITATION, SQUAD_PAGE, answer_metric_info, answer_scores
from evaluation.metrics import exact_match

_CITATION = SQUAD_CITATION

_DESCRIPTION = """\
1 when the normalized prediction equals a normalized gold answer, else 0; the mean over examples. Normalisation
as in SQuAD's evaluation script (and LongBench's copy): lower-case, delete ASCII punctuation, drop the whole
words a/an/the with Python `re` word boundaries, collapse whitespace.
"""


class ExactMatch(evaluate.Metric):
    def _info(self):
        return answer_metric_info("exact_match", _DESCRIPTION, _CITATION, reference_urls=[SQUAD_PAGE])

    def _compute(self, predictions, references, per_row=False):
        return answer_scores("exact_match", exact_match, predictions, references, per_row)
