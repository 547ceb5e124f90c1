"""Case-insensitive containment, the KV-retrieval score of the Lost in the Middle release, as an `evaluate` metric."""

import evaluate

from evaluation.metric_modules import ANSWER_INPUTS, answer_features, mean, score_rows
from evaluation.metrics import kv_containment

_CITATION = """\
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

_DESCRIPTION = """\
1 when a gold answer occurs in the prediction, compared case-insensitively with no other normalisation, else 0;
the mean over examples. The release's scripts/evaluate_kv_responses.py scores KV retrieval this way
(value.lower() in model_answer.lower()). Unlike best-subspan EM it keeps punctuation, so the UUID "a-b" is not
found in "ab", and a value such as "A" is not normalized away.
"""


class KvContainment(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=ANSWER_INPUTS.format(name="kv_containment"),
            features=answer_features(),
            codebase_urls=["https://github.com/nelson-liu/lost-in-the-middle"],
        )

    def _compute(self, predictions, references, per_row=False):
        scores = score_rows(kv_containment, predictions, references)
        return {"kv_containment": mean(scores), **({"per_row": scores} if per_row else {})}
