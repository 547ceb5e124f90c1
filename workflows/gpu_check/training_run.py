"""Lightning + DeepSpeed ZeRO-2 on the device: a tiny OLMo-2 with REPO learns, checkpoints, resumes exactly, exports.

The runs are the project's own command, `torchrun -m repo_train fit --config
FILE`, with a config written here: on CUDA the DeepSpeed strategy (NCCL) with
the packaged ZeRO-2 JSON and `bf16-mixed`; on the CPU (the tests' stand-in)
the `CPUDeepSpeedStrategy` twin (gloo) in fp32. Run A trains `STEPS` steps and
saves a checkpoint every `STEPS // 2`; run B resumes from A's middle checkpoint
into another directory. Losses come from each run's CSV log. Every command is
also written to WORKDIR/commands.sh, so a failing step can be rerun alone.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch
import yaml
from transformers import AutoModelForCausalLM

from repo_train.data.synthetic import SyntheticDataset
from repo_train.export import export_checkpoint
from repo_train.training.strategies import DEFAULT_ZERO2_CONFIG
from workflows.commands import CommandRunner, last_checkpoint, logged_train_losses
from workflows.gpu_check.rows import FAIL, PASS, Row, at_least, relative_difference, within

STEPS = 20
#: The mean loss of the last 5 steps must be at least this far (nats) below the first step's. Measured on the CPU
#: (fp32, one process): 0.95 (5.56 -> 4.60, the synthetic corpus's unigram level); a model that does not learn: ~0.
LOSS_FALL = 0.5
#: Resumed vs uninterrupted losses, relative to max |loss|: fp32 on the CPU is the same arithmetic (0 measured);
#: bf16 on CUDA allows for kernels that sum in a different order from run to run (atomics in attention backward).
RESUME_TOLERANCE = {"cpu": 1e-6, "cuda": 1e-3}
GLOBAL_BATCH = 8


def train_config(device: str, root: Path, processes: int) -> dict:
    """The `fit` config of run A (run B adds `--ckpt_path` and another root)."""
    cuda = device.startswith("cuda")
    strategy = "pytorch_lightning.strategies.DeepSpeedStrategy" if cuda else \
        "repo_train.training.strategies.CPUDeepSpeedStrategy"  # fmt: skip
    return {
        "seed_everything": 0,
        "trainer": {
            "accelerator": "gpu" if cuda else "cpu",
            "devices": processes,
            "strategy": {"class_path": strategy, "init_args": {"config": str(DEFAULT_ZERO2_CONFIG)}},
            "precision": "bf16-mixed" if cuda else "32-true",
            "max_steps": STEPS,
            "gradient_clip_val": 1.0,
            "use_distributed_sampler": False,
            "log_every_n_steps": 1,
            "enable_progress_bar": False,
            "logger": {"class_path": "pytorch_lightning.loggers.CSVLogger", "init_args": {"save_dir": str(root)}},
            "default_root_dir": str(root),
        },
        "model": {"preset_name": "tiny", "position": "repo", "lr": 3e-3, "attn_implementation": "sdpa"},
        "data": {  # the id corpus, named: `fit`'s own default is its text form, sized for `tiny-byte`
            "train": {"class_path": "repo_train.data.SyntheticData"},
            "global_batch_size": GLOBAL_BATCH,
            "micro_batch_size": GLOBAL_BATCH // processes,
        },
        "checkpoint": {"every_n_train_steps": STEPS // 2, "save_last": True, "save_top_k": -1},
    }


def _fit(runner: CommandRunner, title: str, config: Path, processes: int, *more: str) -> None:
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}"]
    runner.run_argv(title, [*launcher, "-m", "repo_train", "fit", "--config", str(config), *more],
                    log=config.with_suffix(".log"), echo=False)  # fmt: skip


def training_rows(device: str, workdir: Path, processes: int = 1) -> list[Row]:
    """Loss falls, checkpoints saved, resume equals the uninterrupted run, the export loads and is the trained model."""
    workdir = Path(workdir).resolve()  # the runs start in it: a relative path would be read from inside itself
    runner = CommandRunner(workdir, description="check-gpu: Lightning + DeepSpeed ZeRO-2 runs", cwd=workdir,
                           env={"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")})  # fmt: skip
    runs = {name: workdir / f"train-{name}" for name in ("a", "b")}
    config = workdir / "train-a.yaml"
    config.write_text(yaml.safe_dump(train_config(device, runs["a"], processes), sort_keys=False))
    name = f"train: DeepSpeed ZeRO-2 {device} x{processes}"
    try:
        _fit(runner, "fit: run A", config, processes)
    except subprocess.CalledProcessError:
        return [Row(name, FAIL, note=f"`fit` failed; see {config.with_suffix('.log')}, rerun: {workdir}/commands.sh")]
    first = logged_train_losses(runs["a"])
    steps = sorted(first)
    losses = [first[s] for s in steps]
    rows = []
    if len(losses) < 10:
        return [Row(name, FAIL, f"{len(losses)} losses logged", f"{STEPS}", "the CSV log is missing steps")]
    fall = losses[0] - sum(losses[-5:]) / 5
    rows.append(at_least(f"train: loss falls ({device}, {STEPS} steps)", fall, LOSS_FALL,
                         f"first step {losses[0]:.3f}, last 5 steps {sum(losses[-5:]) / 5:.3f}", unit="nats"))  # fmt: skip
    middle = sorted(runs["a"].rglob(f"epoch=*-step={STEPS // 2}.ckpt"))
    last = last_checkpoint(runs["a"]) if list(runs["a"].rglob("last*.ckpt")) else None
    saved = bool(middle) and last is not None
    rows.append(Row("train: checkpoints saved", PASS if saved else FAIL, f"{len(middle) + (last is not None)} of 2",
                    "step 10 and last", "DeepSpeed directories" if saved and middle[0].is_dir() else ""))  # fmt: skip
    if not saved:
        return rows
    config_b = workdir / "train-b.yaml"
    config_b.write_text(yaml.safe_dump(train_config(device, runs["b"], processes), sort_keys=False))
    try:
        _fit(runner, "fit: run B, resumed at the middle checkpoint", config_b, processes, "--ckpt_path", str(middle[0]))
    except subprocess.CalledProcessError:
        rows.append(Row("train: resume", FAIL, note=f"`fit --ckpt_path` failed; see {config_b.with_suffix('.log')}"))
    else:
        resumed = logged_train_losses(runs["b"])
        common = sorted(set(resumed) & {s for s in steps if s >= STEPS // 2})
        if len(common) < STEPS // 2 - 1:
            rows.append(Row("train: resume continues exactly", FAIL, f"{len(common)} steps overlap", "", ""))
        else:
            drift = relative_difference(torch.tensor([resumed[s] for s in common]),
                                        torch.tensor([first[s] for s in common]))  # fmt: skip
            tolerance = RESUME_TOLERANCE["cuda" if device.startswith("cuda") else "cpu"]
            rows.append(within("train: resume continues exactly", drift, tolerance,
                               f"losses of steps {common[0]}-{common[-1]}"))  # fmt: skip
    rows.append(export_row(last, workdir / "exported", losses))
    return rows


def export_row(checkpoint: Path, out: Path, losses: list[float]) -> Row:
    """`export` of the last checkpoint loads with the HF Auto class and is the trained model, not a fresh one.

    Its loss on the synthetic corpus must be nearer the last training losses
    than the first (below their midpoint).
    """
    export_checkpoint(checkpoint, out)
    model = AutoModelForCausalLM.from_pretrained(out).eval()
    batch = torch.stack([SyntheticDataset(num_samples=GLOBAL_BATCH, seed=7)[i]["input_ids"]
                         for i in range(GLOBAL_BATCH)])  # fmt: skip
    with torch.no_grad():
        loss = float(model(batch, labels=batch).loss)
    midpoint = (sum(losses[:3]) / 3 + sum(losses[-3:]) / 3) / 2
    method = getattr(model.config, "position_method", None)
    ok = method == "repo" and loss < midpoint
    return Row("train: export loads (HF Auto class)", PASS if ok else FAIL, f"loss {loss:.3f}",
               f"< {midpoint:.3f}, repo", f"{type(model).__name__}, position_method={method}")  # fmt: skip
