"""Best-subspan exact match, the multi-document QA score of the Lost in the Middle release, as an `evaluate` metric."""

import evaluate

from evaluation.metric_modules import ANSWER_INPUTS, answer_features, mean, score_rows
from evaluation.metrics import best_subspan_em

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
1 when any gold answer, normalized, is a substring of the normalized prediction, else 0; the mean over examples.
Normalisation as in the release (src/lost_in_the_middle/metrics.py): lower-case, delete ASCII punctuation, drop
the whole words a/an/the with the `regex` module's word boundaries, collapse whitespace. A gold answer that
normalizes to "" (e.g. "The") matches every prediction, as in the release.
"""


class BestSubspanEm(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=ANSWER_INPUTS.format(name="best_subspan_em"),
            features=answer_features(),
            codebase_urls=["https://github.com/nelson-liu/lost-in-the-middle"],
        )

    def _compute(self, predictions, references, per_row=False):
        scores = score_rows(best_subspan_em, predictions, references)
        return {"best_subspan_em": mean(scores), **({"per_row": scores} if per_row else {})}
