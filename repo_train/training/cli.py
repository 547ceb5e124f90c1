"""`python -m repo_train fit|validate`: LightningCLI over the module and data module.

Without a config file it trains the built-in tiny default (tiny OLMo-2 with
REPO on the synthetic corpus, CPU, about a minute). With
`--config configs/train/<run>.yaml` it runs a paper configuration; under
`torchrun` each process runs this same command (Lightning reads the torchrun
environment), and ends by itself if the launcher dies (`launcher_watch`).

Bad input ends in one line on stderr and exit code 2 (through
`repo_common.cli_errors.report_user_errors`), before anything is written: parser
errors (an unknown option, a value of the wrong type, a config file that is
missing or not a YAML mapping) are raised instead of printing the ~90-line
usage; the settings that need no model (`settings_checks.check_settings`: the
checkpoint path, the root dir, the checkpoint interval, the batch split) are
checked as soon as the parse is done, before the model is built or any data is
read; and `before_fit` reads the data and checks the model config, the
checkpoint and the root dir before the Trainer writes its first file.
`check_arguments` runs only the parse and those checks (a loop file's train
configs are judged with it).

Resuming (`--ckpt_path`) compares the checkpoint's saved hyperparameters (the
module's and the data module's) with the values given on the command line and
in config files: values not given are resumed as saved; a given value that
differs is an error naming the key and both values, unless
`--allow_hparam_changes true`, which makes the given values win (the model's
shape, position method and training data never change on resume). See
`checks.compare_resume_hparams`.

Ctrl-C (SIGINT) or SIGTERM while training writes the last checkpoint at the
next optimizer-step boundary and exits 130 / 143 (`training.interrupt`);
rerunning the same command then resumes it (a `fit` without `--ckpt_path`
whose root's newest checkpoint records that a signal stopped its run), with a
one-line notice. A finished run's root is still refused without `--ckpt_path`.
"""

from __future__ import annotations

import argparse
import ast
import json
import logging
import os
import re
import shlex
import sys
import warnings
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import fields
from pathlib import Path

import pytorch_lightning as pl
import torch
import yaml
from lightning_fabric.plugins import CheckpointIO
from lightning_fabric.utilities.exceptions import MisconfigurationException
from pytorch_lightning.callbacks import ModelCheckpoint, ProgressBar
from pytorch_lightning.cli import LightningCLI
from pytorch_lightning.utilities.rank_zero import rank_zero_only

from repo_common import user_code
from repo_common.config_cli import take_flag
from repo_common.cpu_threads import busy_cores_warning
from repo_common.launcher_watch import watch_launcher
from repo_common.progress import is_terminal
from repo_common.run_lock import locked_directory
from repo_common.user_code import subclasses
from repo_train.checkpoints import (
    LIGHTNING_CKPT_ALIASES,
    read_global_step,
    read_hyperparameters,
    read_interruption,
)
from repo_train.data import (
    BUILT_IN_SOURCES,
    DataSource,
    SyntheticData,
    SyntheticTextData,
    legacy_source_message,
    source_class,
)
from repo_train.modeling.accounting import config_parameter_report
from repo_train.modeling.position_config import PositionConfig, position_class
from repo_train.modeling.presets import preset
from repo_train.training import strategies  # noqa: F401  (registers the "deepspeed_cpu" strategy)
from repo_train.training.activation_checkpointing import checkpoint_plan
from repo_train.training.atomic_checkpoint_io import AtomicCheckpointIO
from repo_train.training.callbacks import ProgressLog, StepProgressBar, ThroughputMonitor
from repo_train.training.checks import (
    ALLOW_HPARAM_CHANGES,
    check_config_overrides,
    check_init_from,
    check_resume,
    compare_resume_hparams,
    moved_option_error,
    preset_overridden_by_init_from,
)
from repo_train.training.datamodule import RePoDataModule
from repo_train.training.fsdp2 import is_model_parallel
from repo_train.training.interrupt import InterruptCheckpoint, Stop, StoppedBySignal
from repo_train.training.module import NonFiniteLossError, RePoLightningModule, model_config_fields
from repo_train.training.parse_errors import parse_error_line as plain_parse_error_line
from repo_train.training.plan import PlanOptions, TrainingPlan, training_plan
from repo_train.training.settings_checks import (
    MOVED_MODEL_OPTIONS,
    batch_accumulation,
    check_every_n_train_steps,
    check_no_earlier_run,
    check_root_dir,
    check_settings,
    check_validate_inputs,
    config_file_arguments,
    earlier_run_checkpoint,
    named_class_paths,
    read_config_files,
    unwritable_root_dir,
)

# Every Trainer with a logger prints Lightning's advertisement for its cloud logger (litlogger) at info
# level; it says nothing about the run. Only that one message is dropped.
_LITLOGGER_TIP = re.compile(r"Tip: .*litlogger")
logging.getLogger("pytorch_lightning.utilities.rank_zero").addFilter(
    lambda record: not _LITLOGGER_TIP.search(record.getMessage())
)

TINY_TRAINER_DEFAULTS = {
    "max_steps": 300,
    "accelerator": "auto",
    "devices": 1,
    "precision": "32-true",
    "gradient_clip_val": 1.0,
    "gradient_clip_algorithm": "norm",
    "log_every_n_steps": 10,
    "use_distributed_sampler": False,  # RePoDataModule shards and resumes the data itself
    "default_root_dir": "outputs/tiny-repo",
}


#: The model and data of `fit` without a config (configs/train/tiny-repo.yaml writes them out): the tiny model
#: sized to the byte tokenizer, on the synthetic episodes written as text through it, so the export carries the
#: tokenizer it was trained with and `python -m evaluation run --model EXPORT` takes it as it is.
TINY_MODEL_DEFAULTS = {"model.preset_name": "tiny-byte"}
#: The training data when `data.train` is not given. Not a parser default: jsonargparse would carry a default
#: class's options (its `tokenizer`, its `seq_len`) into another class named in a config file.
TINY_TRAIN_DATA = SyntheticTextData().to_config()


class _NotFreshOnResume(logging.Filter):
    """Drops "has no REPO weights: ... start from fresh ones" while resuming: the checkpoint holds them."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "start from fresh ones" not in record.getMessage()


@contextmanager
def _not_fresh_on_resume() -> Iterator[None]:
    """`_NotFreshOnResume` on the modeling logger for the `with` block only (one resumed subcommand)."""
    logger, note = logging.getLogger("repo_train.modeling.olmo2"), _NotFreshOnResume()
    logger.addFilter(note)
    try:
        yield
    finally:
        logger.removeFilter(note)


def continue_logger_version(loggers, ckpt_path: str | None) -> None:
    """A resumed run logs (and so checkpoints) into the `version_N` directory its checkpoint came from, not a
    new `version_N+1`: the run's metrics and checkpoints stay in one place. Only for a logger whose version
    was left to Lightning (not chosen in the config) and a checkpoint under that logger's directory."""
    if not ckpt_path or str(ckpt_path) in LIGHTNING_CKPT_ALIASES:
        return
    path = Path(ckpt_path).resolve()
    match = re.search(r"(?:^|/)version_(\d+)/checkpoints(?:/|$)", path.as_posix())
    if match is None:
        return
    for logger in loggers:
        root = getattr(logger, "root_dir", None)
        if getattr(logger, "_version", 0) is None and root and path.is_relative_to(Path(root).resolve()):
            logger._version = int(match.group(1))  # read lazily by log_dir: set before the first log


def interrupted_run_checkpoint(root: str | None) -> tuple[Path, dict] | None:
    """(checkpoint, its record) when the newest checkpoint in a local `root` was written because a signal
    stopped the run (`training.interrupt`): that run resumes by rerunning its command. None otherwise (no
    checkpoint, a finished run's, one killed without a word, an unreadable one: those `fit` refuses)."""
    if root is None or "://" in str(root):
        return None
    found = earlier_run_checkpoint(str(root))
    record = read_interruption(found) if found is not None else None
    return (found, record) if record is not None else None


def resume_command(argv: list[str], checkpoint: str | None) -> str:
    """The command that resumes a run stopped by a signal: its own, with a `--ckpt_path` it gave pointed at the
    checkpoint just written (without one, rerunning resumes by itself)."""
    if "TORCHELASTIC_RUN_ID" in os.environ:
        return "the same torchrun command"
    words, skip = [], False
    for index, arg in enumerate(argv):
        if skip:
            skip = False
        elif arg == "--ckpt_path" and index + 1 < len(argv):
            skip = True
            if checkpoint:
                words += ["--ckpt_path", checkpoint]
        elif arg.startswith("--ckpt_path="):
            words += [f"--ckpt_path={checkpoint}"] if checkpoint else []
        else:
            words.append(arg)
    return shlex.join(["python", "-m", "repo_train", *words])


def stop_line(stop: Stop, argv: list[str], last_checkpoint: str | None, max_steps: int) -> str:
    """The one line a run stopped by a signal ends with: where its work is and how to resume it."""
    of = f" of {max_steps}" if max_steps > 0 else ""
    where = f"stopped by {stop.signal} at step {stop.step}{of}"
    if stop.checkpoint:
        return (
            f"{where}; checkpoint written in {stop.seconds:.2f} s: {stop.checkpoint}; to resume, run the same "
            f"command again: {resume_command(argv, stop.checkpoint)}"
        )
    if stop.step == 0:
        return f"{where}, before training started: nothing trained, nothing written"
    record = read_interruption(last_checkpoint) if last_checkpoint else None
    if record is not None and record.get("step") == stop.step:  # this stop's own checkpoint, written before the
        return (  # next signal stopped the run at once: it is the one to resume, not an older one
            f"{where}; its checkpoint was written before the next signal: {last_checkpoint}; to resume, run the same "
            f"command again: {resume_command(argv, last_checkpoint)}"
        )
    if last_checkpoint:  # a second signal cut the write short, or a resumed run stopped before its first step
        return (
            f"{where} without writing a checkpoint; the last one is {last_checkpoint}: resume it with "
            f"--ckpt_path {last_checkpoint}"
        )
    return f"{where} without writing a checkpoint, and none was written before: the run starts afresh"


def _check_steps_left(ckpt_path: str, max_steps) -> None:
    """A resume whose --trainer.max_steps is below the checkpoint's step would train nothing (Lightning says only
    "no training batches"): refused naming both."""
    step = read_global_step(ckpt_path)
    if step is None or not isinstance(max_steps, int) or max_steps < 0 or max_steps >= step:
        return
    raise ValueError(
        f"--trainer.max_steps {max_steps} is below the step of the checkpoint it resumes ({step}, {ckpt_path}): "
        f"nothing would train. Pass --trainer.max_steps above {step} to go on, or start a new run elsewhere"
    )


class RePoCLI(LightningCLI):
    #: Whether the model-free checks judge `trainer.default_root_dir` (not for a caller that sets it itself).
    judge_root_dir = True
    #: Whether resuming an interrupted run by itself is announced (not while only checking arguments).
    announce_resume = True

    def add_arguments_to_parser(self, parser) -> None:
        # Always-on callbacks, configurable as `checkpoint:`, `throughput:` and `progress_log:` sections of the YAML.
        parser.add_lightning_class_args(ModelCheckpoint, "checkpoint")
        parser.set_defaults(
            {"checkpoint.every_n_train_steps": 100, "checkpoint.save_last": True, "checkpoint.save_top_k": -1}
        )
        parser.add_lightning_class_args(ThroughputMonitor, "throughput")
        parser.add_lightning_class_args(ProgressLog, "progress_log")
        parser.add_class_arguments(PlanOptions, "plan")
        parser.set_defaults(TINY_MODEL_DEFAULTS)
        user_code.add_import_argument(parser)
        parser.add_argument(
            f"--{ALLOW_HPARAM_CHANGES}",
            type=bool,
            default=False,
            help="with --ckpt_path: resume with given model/data values that differ from the checkpoint's "
            "(without it such a difference is an error; shape, position method and training data never change)",
        )

    def parse_arguments(self, parser, args) -> None:
        """Lightning's parse, minus its warning about `args` and sys.argv together (main(argv) passes both)."""
        self._argv = args
        self.config = parser.parse_args(args)

    def _instantiate_trainer(self, config: dict, callbacks: list) -> pl.Trainer:
        """Lightning's, with `StepProgressBar` as the bar unless the config names one (Lightning's counts batches)."""
        given = config.get("callbacks") or []
        given = given if isinstance(given, list) else [given]
        if config.get("enable_progress_bar", True) and not any(isinstance(c, ProgressBar) for c in given + callbacks):
            callbacks = [*callbacks, StepProgressBar()]
        callbacks = [*callbacks, InterruptCheckpoint()]  # Ctrl-C / SIGTERM: the last checkpoint, then stop
        plugins = config.get("plugins") or []
        plugins = plugins if isinstance(plugins, list) else [plugins]
        deepspeed = "deepspeed" in str(config.get("strategy", "")).lower()  # writes its own checkpoint directories
        if not deepspeed and not any(isinstance(p, CheckpointIO) for p in plugins):
            config = {**config, "plugins": [*plugins, AtomicCheckpointIO()]}  # a full disk keeps the last good one
        return super()._instantiate_trainer(config, callbacks)

    def _parse_ckpt_path(self) -> None:
        """Replaces Lightning's: it loaded the checkpoint's model hyperparameters over the given ones, silently.

        Here the checkpoint is read with the project's safe reader (weights_only,
        memory-mapped; a damaged file is one line), and the saved model and data
        hyperparameters are compared with the explicitly given ones
        (`compare_resume_hparams`): saved values fill in what was not given.
        """
        subcommand = self.config.get("subcommand")
        if not subcommand:
            return
        section = self.config[subcommand]
        ckpt_path = section.get("ckpt_path")
        if not ckpt_path and subcommand == "fit" and self.judge_root_dir:
            ckpt_path = self._resume_interrupted_run(section)
        if not ckpt_path or str(ckpt_path) in LIGHTNING_CKPT_ALIASES:
            return
        saved = read_hyperparameters(ckpt_path)
        if subcommand == "fit":
            _check_steps_left(str(ckpt_path), section.get("trainer.max_steps"))
        explicit = self.parser.parse_args(self._argv, defaults=False)[subcommand]
        given = {}
        for name in ("model", "data"):
            values = explicit.get(name)
            given[name] = values.as_dict() if hasattr(values, "as_dict") else dict(values or {})
        take, warning = compare_resume_hparams(str(ckpt_path), saved, given, bool(section.get(ALLOW_HPARAM_CHANGES)))
        update = {}
        for name, values in take.items():
            known = set(section[name].keys()) if section.get(name) is not None else set()
            values = {k: v for k, v in values.items() if k in known}  # keys of an older version are dropped
            if values:
                update[name] = values
        if update:
            self.config = self.parser.parse_object({subcommand: update}, self.config)
        if warning and rank_zero_only.rank == 0:
            print(warning, file=sys.stderr, flush=True)

    def _resume_interrupted_run(self, section) -> str | None:
        """The checkpoint of a run a signal stopped in this root, set as `ckpt_path` (announced in one line)."""
        found = interrupted_run_checkpoint(section.get("trainer.default_root_dir"))
        if found is None:
            return None
        path, record = found
        section["ckpt_path"] = str(path)
        if self.announce_resume and rank_zero_only.rank == 0:
            print(
                f"resuming the run stopped by {record.get('signal', 'a signal')} at step {record.get('step', '?')} "
                f"from {path} (as --ckpt_path {path} would)",
                file=sys.stderr,
                flush=True,
            )
        return str(path)

    def before_instantiate_classes(self) -> None:
        """The settings that need no model, judged before the model is built or any data is read."""
        self._default_train_data()
        if self.subcommand is not None:
            section = self.config[self.subcommand]
            if self.subcommand == "fit" and section.get("plan.only"):
                self._print_plan(section)
            check_settings(self.subcommand, section.get, root_dir=self.judge_root_dir)
            checkpoint_plan(section.get("model.activation_checkpointing"), "--model.activation_checkpointing")
            self._check_preset_with_init_from(section)

    def _print_plan(self, section) -> None:
        """`--plan.only true`: the plan (memory per GPU, hours), then exit 0; a setting that does not fit its GPU
        is refused in one line instead. Nothing is checked that the plan does not need (the root dir, init_from's
        weights): a plan is made before the allocation, often on another machine."""
        plan = training_plan(section.get)
        problem = plan.refusal()
        if problem:
            raise ValueError(problem)
        if rank_zero_only.rank == 0:
            print(plan.report(), flush=True)
        raise PlanShown

    def _default_train_data(self) -> None:
        """`data.train` not given is `TINY_TRAIN_DATA`, written into the config, so config.yaml and the checkpoint
        name it (export reads the tokenizer there). `data: null` is left for `check_settings` to refuse."""
        given = self.config[self.subcommand] if self.subcommand else self.config
        if given.get("data") is None or given.get("data.train") is not None:
            return
        update = {"data": {"train": TINY_TRAIN_DATA}}
        self.config = self.parser.parse_object({self.subcommand: update} if self.subcommand else update, self.config)

    def _check_preset_with_init_from(self, section) -> None:
        """A preset the user set that `init_from` would replace by a model of another shape is refused; the default
        preset is not (init_from decides, as documented). Parsed again without defaults only when they differ."""
        problem = preset_overridden_by_init_from(
            section.get("model.preset_name"), section.get("model.init_from"), section.get("model.config_overrides")
        )
        if problem is None:
            return
        model = self.parser.parse_args(self._argv, defaults=False)[self.subcommand].get("model")
        given = model.as_dict() if hasattr(model, "as_dict") else dict(model or {})
        if given.get("preset_name") is not None:
            raise ValueError(problem)

    def before_fit(self) -> None:
        """Everything that can be checked before the Trainer writes its first file (a bad input then leaves none)."""
        model, trainer = self.model, self.trainer
        check_config_overrides(model.hparams.config_overrides)
        check_init_from(model.hparams.init_from)
        ckpt_path = self.config_init[self.subcommand].get("ckpt_path")
        check_no_earlier_run(str(trainer.default_root_dir), ckpt_path)
        check_resume(ckpt_path, trainer.world_size, model_parallel=is_model_parallel(trainer.strategy))
        continue_logger_version(trainer.loggers, ckpt_path)
        check_every_n_train_steps(self.config[self.subcommand].get("checkpoint.every_n_train_steps"))
        if trainer._accelerator_connector.use_distributed_sampler:
            raise ValueError(
                "set trainer.use_distributed_sampler: false; RePoDataModule shards and resumes the data itself."
            )
        # Accumulation is computed from the global batch; fail now, not inside a worker.
        batch_accumulation(
            self.datamodule.hparams.global_batch_size, self.datamodule.hparams.micro_batch_size, trainer.world_size
        )
        config = model.model_config()  # unknown position method, bad init_from config: before any write
        self.datamodule.build_sources()  # missing, empty or damaged data files
        self.datamodule.check_model(config)
        if trainer.strategy.root_device.type == "cpu" and trainer.is_global_zero:
            note = busy_cores_warning(torch.get_num_threads())
            if note:
                print(note, file=sys.stderr, flush=True)

    def before_validate(self) -> None:
        """`validate` scores the validation data on a checkpoint; without either it would do nothing and exit 0."""
        check_validate_inputs(
            self.datamodule.hparams.get("val"),
            self.config_init[self.subcommand].get("ckpt_path"),
            self.model.hparams.init_from,
        )

    def _run_subcommand(self, subcommand: str) -> None:
        try:
            with ExitStack() as stack:
                self._lock_root_dir(stack, subcommand)
                if self.config_init[subcommand].get("ckpt_path"):
                    # init_from is loaded first, then the checkpoint's weights (REPO's included) replace it
                    stack.enter_context(_not_fresh_on_resume())
                    # the checkpoint directory holds this run's own checkpoints: Lightning's warning that it is not
                    # empty is noise on every resume (a fresh run into a used root is refused before this)
                    stack.enter_context(warnings.catch_warnings())
                    warnings.filterwarnings("ignore", message=r"Checkpoint directory .* exists and is not empty")
                super()._run_subcommand(subcommand)
        except NonFiniteLossError as err:
            print(f"{err}\nlast good checkpoint: {self._last_checkpoint() or 'none saved yet'}", file=sys.stderr)
            raise SystemExit(1) from None
        except (StoppedBySignal, SystemExit) as err:
            # StoppedBySignal: the interrupt checkpoint is written. SystemExit(1): Lightning's answer to a
            # KeyboardInterrupt (a second signal, or Ctrl-C before training started), which ours records.
            stop = err.stop if isinstance(err, StoppedBySignal) else self._interrupt_stop()
            if stop is None:
                raise
            if self.trainer.is_global_zero:
                line = stop_line(stop, self._argv, self._last_checkpoint(), self.trainer.max_steps)
                print(f"python -m repo_train {subcommand}: {line}", file=sys.stderr, flush=True)
            raise SystemExit(stop.exit_code) from None

    def _interrupt_stop(self) -> Stop | None:
        found = [c for c in self.trainer.callbacks if isinstance(c, InterruptCheckpoint)]
        return found[0].stop if found else None

    def _last_checkpoint(self) -> str:
        callback = self.trainer.checkpoint_callback
        return getattr(callback, "last_model_path", "") or getattr(callback, "best_model_path", "")

    def _lock_root_dir(self, stack: ExitStack, subcommand: str) -> None:
        """`fit` owns `trainer.default_root_dir` (ROOT/run.lock, held by global rank 0) until it ends.

        Lightning does not guard it: a second run there would interleave
        checkpoints, logs and config.yaml with the first (`last_checkpoint`
        would then pick either run's). Taking the lock also shows whether the
        root can be written at all. Remote roots (s3://...) are not locked.
        """
        root = str(self.trainer.default_root_dir)
        if subcommand != "fit" or "://" in root:
            return
        check_root_dir(root)
        if self.trainer.global_rank != 0:
            return
        try:
            stack.enter_context(locked_directory(root, f"training root dir {root}"))
        except OSError as err:  # read-only, permission denied, a file on the way
            raise unwritable_root_dir(root, err) from err


def parse_error_line(message: str, subcommand: str | None, argv: list[str] | None = None) -> str:
    """jsonargparse's error as one line: a data source's or the position's in their own words (they name the
    classes), any other as `parse_errors.parse_error_line` says it."""
    key = re.match(r'Parser key "([^"]+)":\s*(.*)', message.strip(), re.DOTALL)
    if key and key.group(1) in ("data.train", "data.val"):
        return data_source_error_line(key.group(1), key.group(2))
    if key and key.group(1) == "model.position":
        return position_error_line(key.group(2), argv or [])
    return plain_parse_error_line(message, subcommand)


def data_source_error_line(key: str, message: str) -> str:
    """jsonargparse's error about a `data.train` / `data.val` source as one line naming the fix.

    Its message lists every member of `DataSource | None` it tried; the useful part is the given value
    (an old `source:` dict, a class that is not a source, an option without a class) or the class's
    complaint (an unknown option, a value of the wrong type).
    """
    names = ", ".join(cls.__name__ for cls in BUILT_IN_SOURCES)
    given = re.search(r"Given value: (.*)\s*$", message)
    value = given.group(1).strip() if given else ""
    nested = re.fullmatch(r"NestedArg\(key='([^']*)', val='(.*)'\)", value)
    try:
        literal = ast.literal_eval(value)
    except (ValueError, SyntaxError):
        literal = value
    complaint = re.search(
        r"Problem with given class_path '([^']+)':\s*(.*?)\n\s*- Expected a <class 'NoneType'>", message, re.DOTALL
    )
    if isinstance(literal, dict) and "source" in literal:
        return legacy_source_message(literal, key)
    if complaint:
        class_path, detail = complaint.group(1), " ".join(complaint.group(2).split())
        try:
            cls = source_class(class_path, f"--{key}")
        except ValueError as err:
            return str(err)
        help_hint = f"(python -m repo_train fit --{key}.help {cls.__name__} lists them)"
        option = re.fullmatch(r"Option '([^']+)' is not accepted", detail)
        if option:
            valid = ", ".join(f.name for f in fields(cls))
            return f"--{key}: {cls.__name__} has no option {option.group(1)!r}; its options are {valid} {help_hint}"
        wrong = re.fullmatch(r'Parser key "([^"]+)": Expected an? (.+?)\. Got value: (.*)', detail)
        if wrong:
            expected = re.sub(r"<class '([\w.]+)'>", r"\1", wrong.group(2))
            return f"--{key}.{wrong.group(1)}: {wrong.group(3)!r} is not valid for {cls.__name__} (expected {expected})"
        return f"--{key}: {cls.__name__}: {detail} {help_hint}"
    if nested:
        return (
            f"--{key}.{nested.group(1)} needs the source's class first (no config names one): e.g. "
            f"--{key} SyntheticData --{key}.{nested.group(1)} {nested.group(2)}; the sources are {names}"
        )
    if isinstance(literal, dict):
        return (
            f"--{key}: {value} has no class_path; write {{class_path: SyntheticData, init_args: {{...}}}} "
            f"(the sources are {names})"
        )
    return (
        f"--{key}: {value!r} is not a data source; name one of {names} (repo_train.data) or the import path "
        "of another DataSource subclass"
    )


def position_error_line(message: str, argv: list[str]) -> str:
    """jsonargparse's error about `model.position` as one line naming the fix.

    It arises for an option given without a position class before it, or one the class does not have (jsonargparse
    then also tries the plain method name, a string, and reports that); an option's wrong type names the option.
    """
    classes = ", ".join(sorted(cls.__name__ for cls in subclasses(PositionConfig)))
    nested = re.search(r"NestedArg\(key='([^']*)', val='(.*?)'\)", message)
    wrong = re.search(r'Parser key "([^"]+)": Expected an? (.+?)\. Got value: (.*)', message)
    given = [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == "--model.position"]
    try:
        cls = position_class(given[-1], "--model.position") if given else None
    except ValueError:
        cls = None
    if nested and cls is not None:
        options = ", ".join(f.name for f in fields(cls))
        return f"--model.position.{nested.group(1)}: {cls.__name__} has no option {nested.group(1)!r}; its options are {options}"
    if nested:
        return (
            f"--model.position.{nested.group(1)} needs the position's class first: e.g. --model.position RepoPosition "
            f"--model.position.{nested.group(1)} {nested.group(2)} (the classes are {classes})"
        )
    if wrong:
        expected = re.sub(r"<class '([\w.]+)'>", r"\1", wrong.group(2))
        return f"--model.position.{wrong.group(1)}: {wrong.group(3)!r} is not valid (expected {expected})"
    return f"--model.position: {' '.join(message.split())[:300]} (python -m repo_train fit --help lists the options)"


def check_moved_options(argv: list[str]) -> None:
    """Old module options on the command line or in a `--config` file: one line naming the new spelling."""
    old: dict = {}
    for index, arg in enumerate(argv):
        option, eq, value = arg.partition("=")
        key = option.removeprefix("--model.")
        if option.startswith("--model.") and key in MOVED_MODEL_OPTIONS:
            text = value if eq else (argv[index + 1] if index + 1 < len(argv) else None)
            try:
                old[key] = yaml.safe_load(text) if text is not None else None
            except yaml.YAMLError:
                old[key] = None
        path = argv[index + 1] if arg == "--config" and index + 1 < len(argv) else arg.removeprefix("--config=")
        if (arg == "--config" or arg.startswith("--config=")) and Path(path).is_file():
            try:
                model = (yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}).get("model") or {}
            except (yaml.YAMLError, UnicodeDecodeError, AttributeError):
                continue  # the parser reports a broken file in its own words
            if isinstance(model, dict):
                section = model["init_args"] if isinstance(model.get("init_args"), dict) else model
                old.update({key: section[key] for key in section if key in MOVED_MODEL_OPTIONS})
    message = moved_option_error(old)
    if message:
        raise ValueError(message)


def import_named_modules(argv: list[str]) -> list[str]:
    """Import the user's modules named by `--import` and the config files' `import:` lists (their policies and
    data sources can then be named); `argv` with the merged list as one `--import` value, for the saved config."""
    named, rest = take_flag(argv, user_code.FLAG)
    configs = read_config_files(config_file_arguments(rest))
    from_files = [name for data in configs if isinstance(data, dict) for name in data.get(user_code.KEY) or []]
    names = user_code.split_names([*from_files, *named])
    user_code.import_user_modules(names)
    for class_path in named_class_paths(rest, configs):  # before LightningCLI imports them
        user_code.check_class_path(class_path, [user_code.module_name_of(name) for name in names])
    return rest + ([user_code.FLAG, json.dumps(names)] if named else [])


class PlanShown(Exception):
    """`fit --plan.only true` printed its plan: the command is done, nothing is built."""


def run(argv: list[str]) -> int:
    watch_launcher()  # a torchrun worker ends when its launcher is gone
    try:
        _start(RePoCLI, argv)
    except PlanShown:
        return 0
    except KeyboardInterrupt:  # Ctrl-C while the data or the model was being read: nothing to keep
        subcommand = argv[0] if argv else "fit"
        print(f"python -m repo_train {subcommand}: stopped by SIGINT before training started", file=sys.stderr)
        return 130
    return 0


def check_arguments(argv: list[str], root_dir: bool = True) -> None:
    """`python -m repo_train fit|validate ARGV` parsed by the live parser and given the checks that need no model
    (`settings_checks.check_settings`; the root dir only with `root_dir`), nothing built and no data read: raises
    the error `run` would refuse these arguments with (ValueError, FileNotFoundError, PermissionError)."""
    _start(_SettingsOnlyCLI if root_dir else _SettingsOnlyCLIAnyRoot, argv)


def plan_arguments(argv: list[str], world_size: int | None = None) -> TrainingPlan:
    """The plan (`training.plan`) of `python -m repo_train fit ARGV`, parsed by the live parser and given the
    checks that need no model except the root dir's (a loop's dry run plans each train step with it);
    `world_size` is the GPUs the run will have when its launcher, not the config, sets them."""
    cli = _start(_SettingsOnlyCLIAnyRoot, argv)
    return training_plan(cli.config[cli.subcommand].get, world_size)


def _start(cli_class: type[RePoCLI], argv: list[str]) -> RePoCLI:
    """`cli_class` over ARGV: the moved options and the user's modules first, a parse error as one line."""
    check_moved_options(argv)
    argv = import_named_modules(argv)
    # A bar only on a terminal; in a log file it is fragments (or nothing until the end), and
    # `ProgressLog` writes plain lines there instead.
    terminal = is_terminal(sys.stdout) and is_terminal(sys.stderr)
    try:
        return cli_class(**_cli_arguments(argv, terminal))
    except argparse.ArgumentError as err:
        subcommand = argv[0] if argv and not argv[0].startswith("-") else None
        raise ValueError(parse_error_line(str(err), subcommand, argv)) from None
    except MisconfigurationException as err:  # Lightning's own checks of the trainer settings
        subcommand = argv[0] if argv and not argv[0].startswith("-") else "fit"
        raise ValueError(
            f"the trainer refused these settings: {' '.join(str(err).split())} (python -m repo_train {subcommand} "
            "--help lists the options)"
        ) from None


def _cli_arguments(argv: list[str], terminal: bool) -> dict:
    """RePoCLI's arguments for `python -m repo_train ARGV`."""
    return {
        "model_class": RePoLightningModule,
        "datamodule_class": RePoDataModule,
        "trainer_defaults": {**TINY_TRAINER_DEFAULTS, "enable_progress_bar": terminal},
        "seed_everything_default": 42,
        "save_config_kwargs": {"overwrite": True},
        "args": argv,
        "parser_kwargs": {"prog": "python -m repo_train", "exit_on_error": False},
    }


class _SettingsOnlyCLI(RePoCLI):
    """Parses `python -m repo_train ARGV` and checks what needs no model (`check_arguments`); builds nothing, runs
    nothing, seeds nothing."""

    announce_resume = False

    def _set_seed(self) -> None:
        pass

    def instantiate_classes(self) -> None:
        pass

    def _run_subcommand(self, subcommand: str) -> None:
        pass


class _SettingsOnlyCLIAnyRoot(_SettingsOnlyCLI):
    judge_root_dir = False


class _ParseOnlyCLI(RePoCLI):
    """Parses and validates a config like `fit` would, without building the trainer or the model."""

    def instantiate_classes(self) -> None:
        pass


def check_config_file(path: str) -> dict:
    """Parse a training YAML against the CLI and check what can be checked without GPUs or data.

    Unknown keys and wrong types fail in the parser (as `fit` would); then the
    model config is built (on the meta device) and the batch arithmetic done
    for the configured devices × nodes. Returns a summary for printing.
    """
    cli = _ParseOnlyCLI(
        RePoLightningModule,
        RePoDataModule,
        trainer_defaults=TINY_TRAINER_DEFAULTS,
        run=False,
        args=import_named_modules(["--config", path]),
    )
    config = cli.config
    model, data, trainer = config.model, config.data, config.trainer
    check_config_overrides(model.config_overrides)
    model_config = preset(model.preset_name, **model_config_fields(model))
    devices = trainer.devices if isinstance(trainer.devices, int) else 1
    world = devices * (trainer.num_nodes or 1)
    accumulation = batch_accumulation(data.global_batch_size, data.micro_batch_size, world)
    seq_len = (DataSource.from_config(data.train.as_dict(), "data.train") if data.train else SyntheticData()).seq_len
    if seq_len > model_config.max_position_embeddings:
        raise ValueError(f"{path}: seq_len {seq_len} > max_position_embeddings {model_config.max_position_embeddings}")
    return {
        "model": model_config,
        "parameters": config_parameter_report(model_config),
        "world_size": world,
        "accumulation": accumulation,
        "tokens_per_step": data.global_batch_size * seq_len,
        "max_steps": trainer.max_steps,
        "lr": model.lr,
        "seed": config.seed_everything,
        "every_n_train_steps": config.checkpoint.every_n_train_steps,
    }
