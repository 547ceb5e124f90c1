"""Each paper's claim judged from the study's numbers: reproduced, in direction, not reproduced, or cannot tell."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from evaluation.report import delta_cell, p_cell
from evaluation.run_config import GOLD_LOGLIK

PAPER_CLAIMS = {
    "bias": "Found in the Middle (Hsieh et al., 2024), Fig. 2-3: LLMs' attention on a document traces a U over its "
    "position, highest at the start and end, even when the document is the relevant one.",
    "accuracy": "Lost in the Middle (Liu et al., 2024): multi-document QA accuracy is highest with the gold document "
    "at the start or end of the context and lowest in the middle (a U-shaped curve).",
    "caliope": "CALIOPE: remapping chunk positions raises accuracy for gold documents in the middle.",
    "fim": "Found in the Middle: calibrating out the positional attention bias raises MDQA accuracy (up to ~15 "
    "points), most for gold documents in the middle.",
    "pcd": "Positional Contrastive Decoding: contrasting logits of a long-range-decayed encoding raises accuracy on "
    "long-context QA / retrieval.",
    "ms_poe": "Ms-PoE: per-head position rescaling raises middle-position accuracy of multi-document QA.",
    "string": "STRING: shifting well-trained positions over the rarely trained large ones raises long-context "
    "retrieval (RULER, NIAH) without training; here, middle-position accuracy of multi-document QA.",
    "attention_buckets": "Attention Buckets: parallel RoPE bases fill each other's attention troughs and raise "
    "multi-document QA accuracy.",
    "positional_hidden": "PositionalHidden: scaling one positional channel of the attention input in the middle "
    "layers raises multi-document QA accuracy, most for gold documents in the middle (NQ 20 documents, "
    "Llama-2-7B-chat: 31.3 to 40.6 on average).",
    "lpes": "LPES: per-layer RoPE scales found by search raise accuracy, mostly in the middle, and beat uniform "
    "scaling (PI) at the same mean scale.",
}


#: Fewer questions than this: no verdict on a claim (a bootstrap over a handful of questions says nothing).
MIN_QUESTIONS = 10


#: The smallest gain a claim's "not reproduced" must rule out, by score: 5 points of accuracy; for the gold
#: log-likelihood (no agreed size of a useful gain in nats) any gain at all.
RULED_OUT_GAIN = {"metric": 0.05, GOLD_LOGLIK: 0.0}


def claim_verdict(vs: Mapping | None, questions: int, score: str = "metric") -> str:
    """Reproduced / reproduced in direction / not reproduced / cannot tell at this power, from a middle Δ.

    Reproduced: the whole 95% CI above 0 and Holm p < 0.05. Not reproduced: the CI rules out a gain of
    5 points (`RULED_OUT_GAIN`: any gain for the gold log-likelihood), or no answer changed. In direction:
    Δ > 0 without significance. Otherwise, or with fewer than `MIN_QUESTIONS` questions: cannot tell.
    """
    if not vs or questions < MIN_QUESTIONS:
        return "cannot tell at this power"
    low, high, p = vs["low"], vs["high"], vs.get("p_holm")
    if vs.get("no_answers"):
        return "cannot tell (the method gave no answers)"
    if vs.get("constant_score") is not None:  # equal because nothing could differ: no evidence either way
        return f"cannot tell (every score {vs['constant_score']:g}, with and without the method)"
    if vs.get("identical"):
        return "not reproduced (no answer changed)"
    if p is not None and p < 0.05 and low > 0:
        return "reproduced"
    if high < RULED_OUT_GAIN[score]:
        return "not reproduced" + (" (hurts)" if p is not None and p < 0.05 and high < 0 else "")
    if vs["mean_diff"] > 0:
        return "reproduced in direction (not significant)"
    return "cannot tell at this power"


def shape_verdict(values: Sequence[float], lows: Sequence[float], highs: Sequence[float], questions: int) -> str:
    """Whether a curve is U-shaped: both edges above the lowest interior point, by their CIs."""
    if len(values) < 3 or questions < MIN_QUESTIONS:
        return "cannot tell at this power"
    interior = min(range(1, len(values) - 1), key=lambda i: values[i])
    if lows[0] > highs[interior] and lows[-1] > highs[interior]:
        return "reproduced"
    if values[0] > values[interior] and values[-1] > values[interior]:
        return "reproduced in direction (not significant)"
    if highs[0] < lows[interior] or highs[-1] < lows[interior]:
        return "not reproduced"
    return "cannot tell at this power"


def dip_verdict(result: Mapping, questions: int) -> str:
    """Whether the gold document in the middle does worse than at the edges, from the paired middle − edges
    (each question's interior positions against its first and last; CI over questions): a sharper test of
    Lost in the Middle's dip than the per-position intervals `shape_verdict` reads, whose spread is mostly
    between questions."""
    low, high = result.get("middle_minus_edges_ci") or (None, None)
    value = result.get("middle_minus_edges")
    if value is None or low is None or questions < MIN_QUESTIONS:
        return "cannot tell at this power"
    if high < 0:
        return "reproduced (the middle below the edges, paired by question)"
    if value < 0:
        return "reproduced in direction (not significant)"
    if low > 0:
        return "not reproduced (the middle above the edges)"
    return "cannot tell at this power"


def claims(main_rows, costly_rows, bias, score: str = "metric", uniform: float | None = None) -> dict:
    """Each paper's claim judged from this study's rows (middle Δ for the methods). `uniform`: the one scale the
    LPES search gave every layer, if so; LPES is then PI at it, and its claim (per-layer scales beat PI) untested."""
    found: dict = {}
    curve = bias["mean"]["gold"]
    found["bias"] = shape_verdict([e["value"] for e in curve], [e["ci"][0] for e in curve],
                                  [e["ci"][1] for e in curve], bias["questions"])  # fmt: skip
    base = main_rows[0]["result"]
    points = sorted(base["by_position"].items(), key=lambda i: int(i[0]))
    shape = shape_verdict([v["accuracy"] for _, v in points], [v["low"] for _, v in points],
                          [v["high"] for _, v in points], base["n_examples"])  # fmt: skip
    dip = dip_verdict(base, base["n_examples"])
    found["accuracy"] = f"U by positions: {shape}; middle vs edges: {dip}"
    for row in [*main_rows, *costly_rows]:
        key = row["key"]
        if key not in PAPER_CLAIMS:
            continue
        middle = (row["result"].get("vs_baseline") or {}).get("middle")
        seen = f"{row['name']}: Δ middle {delta_cell(middle)}, p {p_cell(middle, 'p_holm')}"
        found[key] = {"seen": seen, "verdict": claim_verdict(middle, row["result"]["n_examples"], score)}
        if key == "lpes" and uniform is not None:
            found[key]["verdict"] = (
                f"cannot tell (the search gave every layer the scale {uniform:.3f}: this is PI at that scale, not "
                "per-layer scales)"
            )
    return found
