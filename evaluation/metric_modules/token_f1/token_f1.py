"""SQuAD token F1 (the best over the gold answers) as an `evaluate` metric."""

import evaluate

from evaluation.metric_modules import ANSWER_INPUTS, answer_features, mean, score_rows
from evaluation.metrics import token_f1

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
Bag-of-tokens F1 between the normalized prediction and each normalized gold answer, the best over the answers;
the mean over examples. Normalisation and whitespace tokens as in SQuAD's evaluation script (Python `re` word
boundaries); two answers that both normalize to nothing agree (F1 = 1), as in SQuAD. LongBench scores its QA
datasets with the same function.
"""


class TokenF1(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=ANSWER_INPUTS.format(name="token_f1"),
            features=answer_features(),
            reference_urls=["https://rajpurkar.github.io/SQuAD-explorer/"],
        )

    def _compute(self, predictions, references, per_row=False):
        scores = score_rows(token_f1, predictions, references)
        return {"token_f1": mean(scores), **({"per_row": scores} if per_row else {})}
