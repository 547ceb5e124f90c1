"""One (method, seed) of the reproduction: its training data without the test sequences, its training config,
then train, export and evaluate it through the project's own commands."""

from __future__ import annotations

import json
import shutil
import statistics
import time
from pathlib import Path

import yaml

from evaluation.tasks import build_task
from evaluation.tasks.reversal import build_reversal_prompt, reversal_training_words, reversed_answer
from evaluation.tasks.reversal_tokenizer import unknown_words
from repo_common.atomic import write_text_atomic
from workflows.commands import cpu_trainer_section, last_checkpoint, logged_train_losses
from workflows.reversal.options import Reversal

EVAL_SEED = 12345


TASK = "reversal"


METHOD_LABEL = "baseline"  # the harness's name for "the model as trained"


def held_out_sequences(args: Reversal) -> set[tuple[str, ...]]:
    """The word tuples of the test set (the harness builds the same rows from the same seed)."""
    task = build_task(
        TASK, num_examples=args.examples_per_length, min_length=args.test_min, max_length=args.test_max, seed=EVAL_SEED
    )
    return {tuple(row["words"]) for row in task.rows()}


def write_training_data(path: Path, seed: int, args: Reversal, tokenizer, exclude) -> dict[str, int]:
    """JSONL of {"prompt", "completion"} for one seed, minus test sequences; returns counts."""
    words_lists = reversal_training_words(args.train_examples, args.train_min, args.train_max, seed=seed)
    kept = [words for words in words_lists if tuple(words) not in exclude]
    lines, longest = [], 0
    for words in kept:
        prompt, _ = build_reversal_prompt(words)
        completion = " " + reversed_answer(words)
        unknown = unknown_words(tokenizer, prompt + completion)
        if unknown:
            raise ValueError(f"training text has words the tokenizer does not know: {unknown[:5]}")
        longest = max(longest, len(tokenizer(prompt + completion, add_special_tokens=False)["input_ids"]) + 1)
        lines.append(json.dumps({"prompt": prompt, "completion": completion}))
    write_text_atomic(path, "\n".join(lines) + "\n")
    return {"written": len(kept), "dropped_as_test": len(words_lists) - len(kept), "longest_tokens": longest}


def training_config(
    out: Path,
    run: str,
    method: str,
    seed: int,
    data: Path,
    seq_len: int,
    tokenizer_dir: Path,
    vocab_size: int,
    args: Reversal,
) -> Path:
    config = {
        "seed_everything": seed,
        "trainer": cpu_trainer_section(
            args.steps,
            out / "runs" / run,
            log_every_n_steps=max(1, min(50, args.steps // 10)),
            enable_progress_bar=False,
            logger={
                "class_path": "pytorch_lightning.loggers.CSVLogger",
                "init_args": {"save_dir": str(out / "runs" / run)},
            },
        ),
        "model": {
            "preset_name": "tiny",
            "position": method,
            "lr": args.lr,
            "warmup_steps": min(args.warmup, args.steps - 1),
            "config_overrides": {
                "vocab_size": vocab_size,
                "pad_token_id": 0,
                "eos_token_id": 1,
                "bos_token_id": None,
                "hidden_size": args.hidden,
                "intermediate_size": 4 * args.hidden,
                "num_hidden_layers": 4,
            },
        },
        "data": {
            "train": {
                "class_path": "repo_train.data.PromptCompletionData",
                "init_args": {"paths": [str(data)], "tokenizer": str(tokenizer_dir), "seq_len": seq_len, "seed": seed},
            },
            "global_batch_size": args.batch_size,
            "micro_batch_size": args.batch_size,
        },
        "checkpoint": {"every_n_train_steps": args.steps},
    }
    path = out / "configs" / f"train-{run}.yaml"
    write_text_atomic(path, yaml.safe_dump(config, sort_keys=False))
    return path


def final_train_loss(run_dir: Path, last: int = 5) -> float | None:
    """Mean of the last `last` logged train/loss values of a run's CSV log (None when there is none)."""
    losses = logged_train_losses(run_dir)
    values = [losses[step] for step in sorted(losses)]
    return statistics.fmean(values[-last:]) if values else None


def run_one(
    run, out: Path, method: str, seed: int, data: dict, tokenizer_dir: Path, vocab_size: int, args: Reversal
) -> dict:
    """Train, export and evaluate one (method, seed); returns timings and the final training loss."""
    name = f"{method}-seed{seed}"
    model_dir, eval_dir, run_dir = out / "models" / name, out / "eval" / name, out / "runs" / name
    info: dict = {}
    if not (model_dir / "config.json").is_file():
        shutil.rmtree(run_dir, ignore_errors=True)  # a half-finished run restarts from scratch
        config = training_config(
            out, name, method, seed, data["path"], data["seq_len"], tokenizer_dir, vocab_size, args
        )
        info["train_s"] = run(
            f"train {name}",
            "repo_train",
            "fit",
            "--config",
            str(config),
            log=out / "logs" / f"train-{name}.log",
            echo=False,
        )
        checkpoint = last_checkpoint(run_dir)
        # export writes the directory atomically: it exists complete or not at all
        run(
            f"export {name}",
            "repo_train",
            "export",
            "--checkpoint",
            str(checkpoint),
            "--out",
            str(model_dir),
            "--tokenizer",
            str(tokenizer_dir),
            log=out / "logs" / f"export-{name}.log",
            echo=False,
        )
    info["final_train_loss"] = final_train_loss(run_dir)
    start = time.perf_counter()
    run(
        f"evaluate {name} on lengths {args.test_min}-{args.test_max}",
        "evaluation",
        "run",
        "--model",
        str(model_dir),
        "--tasks",
        TASK,
        "--num_examples",
        str(args.examples_per_length),
        "--seed",
        str(EVAL_SEED),
        "--task_param",
        f"{TASK}:min_length={args.test_min}",
        "--task_param",
        f"{TASK}:max_length={args.test_max}",
        "--max_new_tokens",
        str(args.test_max + 2),
        "--batch_size",
        str(args.eval_batch_size),
        "--methods",
        METHOD_LABEL,
        "--no_progress",
        "--no_report",
        "--out",
        str(eval_dir),
        log=out / "logs" / f"eval-{name}.log",
        echo=False,
    )
    info["eval_s"] = time.perf_counter() - start
    return info
