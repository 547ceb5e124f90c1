"""SQuAD token F1 (the best over the gold answers) as an `evaluate` metric."""

import evaluate

from evaluation.metric_modules.base import SQUAD_CITATION, SQUAD_PAGE, answer_metric_info, answer_scores
from evaluation.metrics import token_f1

_CITATION = SQUAD_CITATION

_DESCRIPTION = """\
Bag-of-tokens F1 between the normalized prediction and each normalized gold answer, the best over the answers;
the mean over examples. Normalisation and whitespace tokens as in SQuAD's evaluation script (Python `re` word
boundaries); two answers that both normalize to nothing agree (F1 = 1), as in SQuAD. LongBench scores its QA
datasets with the same function.
"""


class TokenF1(evaluate.Metric):
    def _info(self):
        return answer_metric_info("token_f1", _DESCRIPTION, _CITATION, reference_urls=[SQUAD_PAGE])

    def _compute(self, predictions, references, per_row=False):
        return answer_scores("token_f1", token_f1, predictions, references, per_row)
