"""Case-insensitive containment, the KV-retrieval score of the Lost in the Middle release, as an `evaluate` metric."""

import evaluate

from evaluation.metric_modules.base import LIU_2024_CITATION, LOST_IN_THE_MIDDLE_CODE, answer_metric_info, answer_scores
from evaluation.metrics import kv_containment

_CITATION = LIU_2024_CITATION

_DESCRIPTION = """\
1 when a gold answer occurs in the prediction, compared case-insensitively with no other normalisation, else 0;
the mean over examples. The release's scripts/evaluate_kv_responses.py scores KV retrieval this way
(value.lower() in model_answer.lower()). Unlike best-subspan EM it keeps punctuation, so the UUID "a-b" is not
found in "ab", and a value such as "A" is not normalized away.
"""


class KvContainment(evaluate.Metric):
    def _info(self):
        return answer_metric_info("kv_containment", _DESCRIPTION, _CITATION, codebase_urls=[LOST_IN_THE_MIDDLE_CODE])

    def _compute(self, predictions, references, per_row=False):
        return answer_scores("kv_containment", kv_containment, predictions, references, per_row)
