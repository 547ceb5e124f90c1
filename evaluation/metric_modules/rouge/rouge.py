"""ROUGE-1/2/L F-measures (each the best over the gold answers) as an `evaluate` metric, offline."""

import evaluate

from evaluation.metric_modules.base import answer_features, score_rows
from evaluation.metrics import ROUGE_TYPES, rouge_scores

_CITATION = """\
@inproceedings{lin2004rouge,
  title={{ROUGE}: A Package for Automatic Evaluation of Summaries},
  author={Lin, Chin-Yew},
  booktitle={Text Summarization Branches Out},
  pages={74--81},
  year={2004}
}
"""

_DESCRIPTION = """\
ROUGE-1, ROUGE-2 and ROUGE-L F-measures from Google's `rouge_score` package (the implementation the Hub's
"rouge" metric wraps, called here directly so it loads offline), each the best over an example's gold answers
and then averaged over examples. `rouge_score`'s default tokenizer lower-cases and keeps only [a-z0-9] runs, so
text without ASCII letters or digits scores 0. LongBench scores its summarization datasets with ROUGE-L.
"""

_INPUTS = """
Args:
    predictions: list of str, one generated answer per example.
    references: list of lists of str (every gold answer of an example), or list of str (one gold answer each).
    use_stemmer: bool, Porter-stem tokens before matching (default False).
    per_row: bool, also return every example's {"rouge1", "rouge2", "rougeL"} under "per_row" (default False).
Returns:
    rouge1, rouge2, rougeL: mean F-measures over the examples, in [0, 1].
"""


class Rouge(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_INPUTS,
            features=answer_features(),
            codebase_urls=["https://github.com/google-research/google-research/tree/master/rouge"],
        )

    def _compute(self, predictions, references, use_stemmer=False, per_row=False):
        rows = score_rows(lambda p, a: rouge_scores(p, a, use_stemmer=use_stemmer), predictions, references)
        means = {name: sum(row[name] for row in rows) / len(rows) for name in ROUGE_TYPES}
        return {**means, **({"per_row": rows} if per_row else {})}
