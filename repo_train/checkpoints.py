"""Reading the training checkpoints repo_train writes: safely, and with one line per problem.

One reader for everything that opens a user's checkpoint: `python -m repo_train
export` (the weights) and `fit/validate --ckpt_path` (the saved hyperparameters,
compared with the command line before training starts).

- A Lightning `.ckpt` file is unpickled with `torch.load(weights_only=True)`;
  a DeepSpeed ZeRO checkpoint directory is merged by DeepSpeed's own
  zero_to_fp32 code with every `torch.load` inside forced to weights_only
  (`TORCH_FORCE_WEIGHTS_ONLY_LOAD`). A crafted checkpoint cannot run code.
  Besides tensors and plain containers only the globals in `SAFE_GLOBALS`
  are allowed.
- A distributed checkpoint directory (torch.distributed.checkpoint, what
  Lightning's `ModelParallelStrategy` writes for FSDP2: `.metadata`,
  `__R_0.distcp` per process, Lightning's `meta.pt`) is read without a
  process group: `meta.pt` weights_only, the `.metadata` index with an
  unpickler that admits only DCP's own metadata classes
  (`DCP_METADATA_GLOBALS`; torch reads it with plain `pickle.load`), and
  only the model's tensors (`state_dict.*`), never the optimizer's pickled
  values.
- Random bytes, a truncated file, a refused global, a directory that is not
  a complete ZeRO checkpoint: each is a `ValueError` with one line naming the
  file and what is accepted.
- `read_hyperparameters` reads only what Lightning saved about the run
  (memory-mapped: a 7B checkpoint is not read into memory to compare a few
  numbers).
"""

from __future__ import annotations

import os
import pickle
import re
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

#: Globals (besides tensors and plain containers, which weights_only allows anyway) that repo_train's
#: checkpoints hold: a plain Lightning .ckpt needs none; the optimizer shards of a DeepSpeed ZeRO-2
#: checkpoint hold these three plain-data classes (found by saving real checkpoints with
#: tests/training/tiny_run.py). Module paths, imported only for a ZeRO checkpoint.
SAFE_GLOBALS = {
    "zero": (
        "deepspeed.runtime.fp16.loss_scaler.LossScaler",  # static loss scale (1.0 in fp32/bf16): numbers
        "deepspeed.runtime.zero.config.ZeroStageEnum",  # enum of the ZeRO stage
        "deepspeed.utils.tensor_fragment.fragment_address",  # dataclass (numel, start)
    )
}
ACCEPTED = "only Lightning checkpoints written by repo_train (python -m repo_train fit) are accepted"
#: What a ZeRO directory must hold, for the messages.
ZERO_LAYOUT = "a ZeRO checkpoint directory holds 'latest' (naming a tag) and TAG/mp_rank_00_model_states.pt"
#: Key of a checkpoint written because a signal stopped its run (`training.interrupt`): {"signal", "step"}.
#: Rerunning the run's command resumes such a checkpoint by itself.
INTERRUPTED_KEY = "repo_train_interrupted"
#: Key of the run's `max_steps` in its checkpoints (the training module writes it), so an export can say whether
#: the weights are those of a finished run.
MAX_STEPS_KEY = "repo_train_max_steps"
#: Files of a distributed (DCP) checkpoint directory: DCP's index, and Lightning's non-tensor state.
DCP_METADATA_FILE, DCP_LIGHTNING_FILE = ".metadata", "meta.pt"
#: What a DCP directory must hold, for the messages.
DCP_LAYOUT = (
    f"a distributed checkpoint directory holds {DCP_METADATA_FILE}, {DCP_LIGHTNING_FILE} and __R_0.distcp files"
)
#: (module, name) of the classes DCP's `.metadata` pickle holds (found by saving real checkpoints with
#: tests/training/tiny_run.py --strategy fsdp2); any torch dtype is allowed too.
DCP_METADATA_GLOBALS = {
    *(
        ("torch.distributed.checkpoint.metadata", name)
        for name in (
            "Metadata",
            "TensorStorageMetadata",
            "BytesStorageMetadata",
            "ChunkStorageMetadata",
            "TensorProperties",
            "StorageMeta",
            "MetadataIndex",
            "_MEM_FORMAT_ENCODING",
        )
    ),
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
    ("torch", "Size"),
    ("torch.serialization", "_get_layout"),
    ("pathlib", "PosixPath"),
    ("collections", "OrderedDict"),
}
#: `ckpt_path` values Lightning resolves itself (not files).
LIGHTNING_CKPT_ALIASES = ("last", "best", "hpc", "registry")


def unreadable_directory(path, kind: str, err: BaseException) -> Exception:
    """The one-line error for a checkpoint directory of `kind` that could not be read: the refusal of a pickled
    object a safe load does not allow, or what failed and which forms are accepted."""
    if isinstance(err, pickle.UnpicklingError):
        return refusal(path, err)
    first = (str(err).strip().splitlines() or [""])[0][:200]
    return ValueError(f"{path}: not a readable {kind} directory ({type(err).__name__}: {first}); {ACCEPTED}")


def _import_global(dotted: str):
    module, _, name = dotted.rpartition(".")
    return getattr(__import__(module, fromlist=[name]), name)


@contextmanager
def weights_only_loads(kind: str) -> Iterator[None]:
    """Every torch.load inside (also in library code asking for weights_only=False) is weights_only."""
    import torch  # heavy: keeps --help fast

    previous = os.environ.get("TORCH_FORCE_WEIGHTS_ONLY_LOAD")
    os.environ["TORCH_FORCE_WEIGHTS_ONLY_LOAD"] = "1"
    try:
        with torch.serialization.safe_globals([_import_global(g) for g in SAFE_GLOBALS.get(kind, ())]):
            yield
    finally:
        if previous is None:
            os.environ.pop("TORCH_FORCE_WEIGHTS_ONLY_LOAD", None)
        else:
            os.environ["TORCH_FORCE_WEIGHTS_ONLY_LOAD"] = previous


def refusal(path: Path, err: Exception) -> ValueError:
    """One line for a checkpoint torch could not (or would not) unpickle."""
    text = str(err)
    refused = re.findall(r"GLOBAL ([\w.]+)", text)
    if isinstance(err, pickle.UnpicklingError) and refused:
        return ValueError(f"{path}: refused to unpickle {refused[0]}; {ACCEPTED}")
    detail = text.split("WeightsUnpickler error:", 1)[-1].strip().splitlines()
    detail = detail[0][:200] if detail else ("empty file" if isinstance(err, EOFError) else type(err).__name__)
    return ValueError(
        f"{path}: not a readable PyTorch checkpoint (damaged, truncated or another format: {detail}); {ACCEPTED}"
    )


def zero_model_states_file(directory: Path) -> Path:
    """The file of a ZeRO checkpoint directory that holds Lightning's state; a clear error if the layout is not there."""
    latest = directory / "latest"
    if not latest.is_file():
        raise ValueError(
            f"{directory} is a directory but not a DeepSpeed ZeRO checkpoint (no 'latest' file in it; {ZERO_LAYOUT}); "
            "pass a Lightning .ckpt file or the whole .ckpt directory DeepSpeed wrote"
        )
    tag = latest.read_text().strip()
    tag_dir = directory / tag
    for name in ("mp_rank_00_model_states.pt", "zero_pp_rank_0_mp_rank_00_model_states.pt"):  # ZeRO-1/2, ZeRO-3
        if (tag_dir / name).is_file():
            return tag_dir / name
    found = sorted(p.name for p in tag_dir.iterdir())[:5] if tag_dir.is_dir() else None
    what = f"{tag_dir} holds {found}" if found is not None else f"{tag_dir} does not exist"
    raise ValueError(
        f"{directory} is an incomplete DeepSpeed ZeRO checkpoint: 'latest' names tag {tag!r} but {what}, without "
        f"mp_rank_00_model_states.pt; copy the whole checkpoint directory again, or use another checkpoint"
    )


def zero_optimizer_shards(directory: Path) -> list[Path]:
    """The optimizer shards (one per process) of a ZeRO checkpoint directory; a clear error if there are none."""
    zero_model_states_file(directory)  # the layout first: 'latest' and the model states it names
    shards = sorted(directory.rglob("*zero_pp_rank_*_mp_rank_*optim_states.pt"))
    if not shards:
        raise ValueError(
            f"{directory} is an incomplete DeepSpeed ZeRO checkpoint: no *_optim_states.pt shard in it (they hold "
            "the fp32 weights); copy the whole checkpoint directory again, or use another checkpoint"
        )
    return shards


def is_distributed_checkpoint(path: Path) -> bool:
    """A torch.distributed.checkpoint directory (FSDP2 under ModelParallelStrategy), not a ZeRO one."""
    return path.is_dir() and ((path / DCP_METADATA_FILE).is_file() or (path / DCP_LIGHTNING_FILE).is_file())


def dcp_lightning_file(directory: Path) -> Path:
    """Lightning's `meta.pt` of a DCP directory (step, loops, hyperparameters); a clear error if incomplete."""
    missing = [name for name in (DCP_METADATA_FILE, DCP_LIGHTNING_FILE) if not (directory / name).is_file()]
    if missing or not any(directory.glob("*.distcp")):
        what = ", ".join(missing) if missing else "any *.distcp file"
        raise ValueError(
            f"{directory} is an incomplete distributed checkpoint: no {what} in it ({DCP_LAYOUT}); copy the whole "
            "checkpoint directory again, or use another checkpoint"
        )
    return directory / DCP_LIGHTNING_FILE


def _dcp_reader(directory: Path):
    """DCP's FileSystemReader whose `.metadata` unpickling admits only `DCP_METADATA_GLOBALS` and dtypes."""
    import torch  # heavy: keeps --help fast
    from torch.distributed.checkpoint import FileSystemReader  # heavy: keeps --help fast
    from torch.distributed.checkpoint.metadata import StorageMeta  # heavy: keeps --help fast

    class RestrictedUnpickler(pickle.Unpickler):
        def find_class(self, module: str, name: str):
            found = super().find_class(module, name) if (module, name) in DCP_METADATA_GLOBALS else None
            if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
                found = getattr(torch, name)
            if found is None:
                raise pickle.UnpicklingError(f"GLOBAL {module}.{name} is not allowed in a checkpoint's .metadata")
            return found

    class Reader(FileSystemReader):
        def read_metadata(self, *args, **kwargs):
            with open(directory / DCP_METADATA_FILE, "rb") as handle:
                metadata = RestrictedUnpickler(handle).load()
            if getattr(metadata, "storage_meta", None) is None:
                metadata.storage_meta = StorageMeta()
            metadata.storage_meta.load_id = self.load_id
            return metadata

    return Reader(directory)


def _load_dcp_model(directory: Path) -> dict:
    """Lightning's dict of a DCP directory: `meta.pt` plus the full (unsharded) model `state_dict`."""
    from torch.distributed.checkpoint.api import CheckpointException  # heavy: keeps --help fast
    from torch.distributed.checkpoint.default_planner import _EmptyStateDictLoadPlanner  # heavy: keeps --help fast
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict  # heavy: keeps --help fast

    state = _load_file(dcp_lightning_file(directory), directory, mmap=True)
    loaded: dict = {}
    reader = _dcp_reader(directory)
    try:
        reader.read_metadata()  # here, not inside DCP's loader, which wraps its errors in CheckpointException
        with weights_only_loads("lightning"):  # DCP's own byte-item reader asks for weights_only=False
            _load_state_dict(
                loaded, storage_reader=reader, planner=_EmptyStateDictLoadPlanner(keys={"state_dict"}), no_dist=True
            )
    except (Exception, CheckpointException) as err:  # a refused global, a damaged shard: one line
        raise unreadable_directory(directory, "distributed checkpoint", err) from err
    return {**state, "state_dict": loaded.get("state_dict")}


def _load_file(file: Path, shown: Path, *, kind: str = "lightning", mmap: bool = False) -> dict:
    import torch  # heavy: keeps --help fast

    if file.stat().st_size == 0:
        raise ValueError(f"{shown}: empty file, not a checkpoint; {ACCEPTED}")
    # mmap reads only what is used, but needs torch's zip format: anything else (a legacy file, random bytes,
    # a zip cut short) is read normally, so that torch's own error names the problem.
    whole_zip = zipfile.is_zipfile(file)
    with open(file, "rb") as handle:
        zip_start = handle.read(4) == b"PK\x03\x04"
    if zip_start and not whole_zip:
        raise ValueError(
            f"{shown}: not a readable PyTorch checkpoint (truncated: a zip archive without its end, the save or the "
            f"copy was cut short); use an earlier checkpoint or copy it again; {ACCEPTED}"
        )
    mmap = mmap and whole_zip
    try:
        with weights_only_loads(kind):
            state = torch.load(file, map_location="cpu", weights_only=True, mmap=mmap)
    except Exception as err:  # random bytes, a truncated zip, a refused global: one line each
        raise refusal(shown, err) from err
    if not isinstance(state, dict):
        raise ValueError(f"{shown}: holds no Lightning state_dict; {ACCEPTED}")  # noqa: TRY004 (a user error)
    return state


def load_lightning_checkpoint(path: str | Path) -> dict:
    """The whole checkpoint (a ZeRO directory merged to one fp32 state_dict; of a distributed checkpoint
    directory, the model's weights without the optimizer state), as Lightning's dict."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(
            f"checkpoint {path} does not exist: pass a .ckpt file (or checkpoint directory) under the run's "
            "lightning_logs/version_N/checkpoints/"
        )
    if is_distributed_checkpoint(path):
        state = _load_dcp_model(path)
    elif path.is_dir():
        from pytorch_lightning.utilities.deepspeed import convert_zero_checkpoint_to_fp32_state_dict  # heavy: Lightning

        zero_optimizer_shards(path)  # the layout, before DeepSpeed's own (less specific) errors
        with tempfile.TemporaryDirectory() as tmp:
            merged = Path(tmp) / "merged.ckpt"
            try:
                with weights_only_loads("zero"):  # DeepSpeed's shard reader hard-codes weights_only=False
                    convert_zero_checkpoint_to_fp32_state_dict(str(path), str(merged))
            except Exception as err:  # any failure to read the user's files is one line
                raise unreadable_directory(path, "DeepSpeed ZeRO checkpoint", err) from err
            state = _load_file(merged, path)
    else:
        state = _load_file(path, path)
    if not isinstance(state.get("state_dict"), dict):
        raise ValueError(f"{path}: holds no Lightning state_dict; {ACCEPTED}")  # noqa: TRY004 (a user error)
    return state


def missing_checkpoint_message(path: str | Path) -> str:
    return f"ckpt_path={str(path)!r} does not exist: pass the .ckpt of an earlier run to resume it"


def _run_state(path: Path) -> dict:
    """Lightning's dict without reading the weights: a `.ckpt` file memory-mapped, only the model-states
    file of a ZeRO directory, or only Lightning's `meta.pt` of a distributed checkpoint directory."""
    if not path.exists():
        raise FileNotFoundError(missing_checkpoint_message(path))
    if is_distributed_checkpoint(path):
        return _load_file(dcp_lightning_file(path), path, mmap=True)
    if path.is_dir():
        return _load_file(zero_model_states_file(path), path, kind="zero", mmap=True)
    state = _load_file(path, path, mmap=True)
    if not isinstance(state.get("state_dict"), dict):
        raise ValueError(f"{path}: holds no Lightning state_dict; {ACCEPTED}")  # noqa: TRY004 (a user error)
    return state


def read_interruption(path: str | Path) -> dict | None:
    """{"signal": "SIGINT", "step": N} if the checkpoint was written because a signal stopped its run
    (`training.interrupt`), else None; an unreadable checkpoint is None too (it is not resumed by itself)."""
    try:
        record = _run_state(Path(path)).get(INTERRUPTED_KEY)
    except (ValueError, OSError):
        return None
    return dict(record) if isinstance(record, dict) else None


def checkpoint_damage(path: str | Path) -> str | None:
    """Why the checkpoint at `path` cannot be read (empty, truncated, not a checkpoint: the reader's one line), or
    None when its run state reads (the weights are not read)."""
    try:
        _run_state(Path(path))
    except (ValueError, OSError) as err:
        return str(err)
    return None


def read_global_step(path: str | Path) -> int | None:
    """The optimiser step the checkpoint was saved at (Lightning's `global_step`), None if it records none."""
    step = _run_state(Path(path)).get("global_step")
    return step if isinstance(step, int) and not isinstance(step, bool) else None


def training_progress(state: dict) -> dict:
    """What a checkpoint's weights are: its optimizer step, the run's total, and whether the run had finished, was
    stopped by a signal (`training.interrupt`), or was saved on the way (a periodic checkpoint). A checkpoint
    written before the total was recorded says "unknown"."""
    step, total = state.get("global_step"), state.get(MAX_STEPS_KEY)
    interrupted = state.get(INTERRUPTED_KEY)
    if isinstance(interrupted, dict):
        status = "interrupted"
    elif isinstance(total, int) and total > 0 and isinstance(step, int):
        status = "finished" if step >= total else "unfinished"
    else:
        status = "unknown"
    return {
        "step": step,
        "total_steps": total if isinstance(total, int) and total > 0 else None,
        "status": status,
        "finished": {"finished": True, "unknown": None}.get(status, False),
        "interrupted": dict(interrupted) if isinstance(interrupted, dict) else None,
    }


def read_hyperparameters(path: str | Path) -> dict[str, dict]:
    """{"model": ..., "data": ...}: the module's and the data module's saved hyperparameters (empty if none).

    Reads a `.ckpt` file memory-mapped, only the model-states file of a ZeRO
    directory, or only `meta.pt` of a distributed checkpoint directory. Lightning's bookkeeping keys (`_instantiator`, `_class_path`)
    are dropped.
    """
    state = _run_state(Path(path))

    def plain(key: str) -> dict:
        values = state.get(key) or {}
        return {k: v for k, v in dict(values).items() if not k.startswith("_")}

    return {"model": plain("hyper_parameters"), "data": plain("datamodule_hyper_parameters")}


def checkpoint_mtime(path: Path) -> float:
    """When a checkpoint was last written: a file's mtime, or a directory's newest (ZeRO, DCP: the files in it
    are rewritten when `last.ckpt` is saved again, not always the directory's own entry list)."""
    if not path.is_dir():
        return path.stat().st_mtime
    return max([path.stat().st_mtime, *(p.stat().st_mtime for p in path.rglob("*") if p.is_file())])


def newest_last_checkpoint(run_dir: str | os.PathLike) -> Path | None:
    """The newest `last.ckpt` (or `last-vN.ckpt` after a rerun) under a training run's default_root_dir,
    a file or a checkpoint directory (ZeRO, FSDP2's distributed checkpoint); None when there is none (or no
    such directory). The one search for it: `fit` (which refuses to start afresh beside it), the
    quickstart's resume and `last_checkpoint`."""
    found = [p for p in Path(run_dir).rglob("last*.ckpt") if re.fullmatch(r"last(-v\d+)?\.ckpt", p.name)]
    return max(found, key=checkpoint_mtime) if found else None
