"""SQuAD exact match (the best over the gold answers) as an `evaluate` metric."""

import evaluate

from evaluation.metric_modules import ANSWER_INPUTS, answer_features, mean, score_rows
from evaluation.metrics import exact_match

_CITATION = """\
@inproceedings{rajpurkar2016squad,
  title={{SQuAD}: 100,000+ Questions for Machine Comprehension of Text},
  author={Rajpurkar, Pranav and Zhang, Jian and Lopyrev, Konstantin and Liang, Percy},
  booktitle={Proceedings of the 2016 Conference on Empirical Methods in Natural Language Processing},
  pages={2383--2392},
  year={2016}
}
"""

_DESCRIPTION = """\
1 when the normalized prediction equals a normalized gold answer, else 0; the mean over examples. Normalisation
as in SQuAD's evaluation script (and LongBench's copy): lower-case, delete ASCII punctuation, drop the whole
words a/an/the with Python `re` word boundaries, collapse whitespace.
"""


class ExactMatch(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=ANSWER_INPUTS.format(name="exact_match"),
            features=answer_features(),
            reference_urls=["https://rajpurkar.github.io/SQuAD-explorer/"],
        )

    def _compute(self, predictions, references, per_row=False):
        scores = score_rows(exact_match, predictions, references)
        return {"exact_match": mean(scores), **({"per_row": scores} if per_row else {})}
