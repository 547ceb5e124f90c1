"""What the bad-input tables share: the tiny inputs they build, lock holders, a row, and the refusal check.

A row (`BadInput`) builds its input (and any earlier outputs) under a fresh
directory, names the command line and its arguments, the expected exit code, a
phrase the one-line message must contain, and optionally a path that must not
exist afterwards (a crafted file's side effect) or a `check` of its own.
`check_row` runs the command's `main(argv)` in this process and checks code,
message and files (`refused_in_one_line`). A row whose setup denies reading a
file (`Context.deny_reading`) runs in a forked child without root's file-mode
overrides, since the tests run as root and root reads a file of mode 0. The tables live beside their package:
tests/test_bad_inputs_{evaluation,search,training}.py (issue 13) and
tests/test_bad_inputs_resume_and_overwrite.py (issue 24), tests/test_bad_inputs_workflows.py (issue 40).
"""

from __future__ import annotations

import ctypes
import errno
import importlib
import io
import json
import os
import resource
import subprocess
import sys
import textwrap
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from transformers import LlamaConfig, LlamaForCausalLM, Olmo2Config, Olmo2ForCausalLM

import repo_train  # noqa: F401  (registers repo_olmo2)
from evaluation.model_loading import byte_tokenizer
from repo_train.modeling import RePoOlmo2ForCausalLM
from repo_train.modeling.presets import tiny

ROOT = Path(__file__).resolve().parents[1]


RUN_LOCK_PY = ROOT / "repo_common" / "run_lock.py"


CLIS = {
    "evaluation": "evaluation.cli",
    "search": "search.cli",
    "repo_train": "repo_train.cli",
    "workflows": "workflows.cli",
}


VOCAB = 258  # the byte tokenizer


def tiny_fields(**overrides) -> dict:
    """A tiny OLMo-2 shape as plain config fields (no position method)."""
    config = tiny(vocab_size=VOCAB, pad_token_id=0, eos_token_id=1, bos_token_id=None, **overrides)
    drop = ("model_type", "architectures", "transformers_version", "position_method", "repo_start_layer")
    return {k: v for k, v in config.to_dict().items() if k not in (*drop, "repo_hidden_size")}


def write_config(path: Path, **changes) -> None:
    config = json.loads((path / "config.json").read_text())
    config.update(changes)
    for key in [k for k, v in changes.items() if v is None]:
        config.pop(key)
    (path / "config.json").write_text(json.dumps(config))


def with_tokenizer(path: Path) -> Path:
    byte_tokenizer().save_pretrained(path)
    return path


def llama_as_olmo2(tmp: Path) -> Path:
    """Llama weights of the same width under an OLMo-2 config.json (names differ: q/k norms, layer norms)."""
    path = tmp / "llama_as_olmo2"
    LlamaForCausalLM(LlamaConfig(**tiny_fields())).save_pretrained(path)
    write_config(path, model_type="olmo2", architectures=["Olmo2ForCausalLM"])
    return with_tokenizer(path)


def olmo2_other_ffn(tmp: Path) -> Path:
    """OLMo-2 weights with a 128-wide MLP, config.json saying 96: mis-shaped."""
    path = tmp / "olmo2_other_ffn"
    Olmo2ForCausalLM(Olmo2Config(**tiny_fields())).save_pretrained(path)
    write_config(path, intermediate_size=96)
    return with_tokenizer(path)


def repo_model(tmp: Path, name: str = "repo") -> Path:
    path = tmp / name
    RePoOlmo2ForCausalLM(
        tiny(vocab_size=VOCAB, pad_token_id=0, eos_token_id=1, position_method="repo")
    ).save_pretrained(path)
    return with_tokenizer(path)


def config_only(tmp: Path, name: str, **config) -> Path:
    """A directory with only a config.json (and a tiny weights file), e.g. of another architecture."""
    path = tmp / name
    path.mkdir()
    if config:
        (path / "config.json").write_text(json.dumps(config))
    save_file({"x": torch.zeros(2)}, path / "model.safetensors", metadata={"format": "pt"})
    return path


def lightning_like(path: Path) -> Path:
    """What export reads from a Lightning .ckpt: model.* weights and the model config."""
    model = RePoOlmo2ForCausalLM(tiny(position_method="repo"))
    state = {f"model.{k}": v for k, v in model.state_dict().items()}
    torch.save({"state_dict": state, "model_config": model.config.to_dict(), "global_step": 1}, path)
    return path


HOLDER = textwrap.dedent(
    """
    import importlib.util, sys
    spec = importlib.util.spec_from_file_location("run_lock", sys.argv[1])
    run_lock = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run_lock)
    with run_lock.run_lock(sys.argv[2], command="holder"):
        print("held", flush=True)
        sys.stdin.read()
    """
)


class Context:
    """What a row's setup gets: the directory, `hold(lock_file)` to have another process own a lock, and
    `deny_reading(path)` for a file that exists but this user may not read."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.holders: list[subprocess.Popen] = []
        self.denied: list[Path] = []

    def deny_reading(self, path: Path) -> Path:
        """Mode 0 on `path` (a file, or a folder nobody may enter); the row then runs without root's powers
        over file modes (`run_cli_as_plain_user`), as the tests run as root."""
        path.chmod(0)
        self.denied.append(path)
        return path

    def restore_modes(self) -> None:
        for path in self.denied:
            path.chmod(0o700 if path.is_dir() else 0o600)

    def hold(self, lock_file: Path) -> subprocess.Popen:
        """Start a process (stdlib only, about 50 ms) that holds `lock_file` until `release_all`."""
        proc = subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(RUN_LOCK_PY), str(lock_file)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout.readline().strip() == "held"
        self.holders.append(proc)
        return proc

    def release_all(self) -> None:
        for proc in self.holders:
            proc.stdin.close()
            proc.wait(timeout=10)


def foreign_lock(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"pid": 4242, "host": "elsewhere.example", "command": "evaluation run"}))


@dataclass(frozen=True)
class BadInput:
    id: str
    cli: str
    """Key of CLIS: whose `main(argv)` runs."""
    setup: Callable[[Context], list[str]]
    """Builds the input (and earlier outputs) under ctx.tmp; returns argv."""
    code: int
    phrase: str
    """Must appear in the one stderr line ("{tmp}" stands for the row's directory)."""
    absent: str | None = None
    """A path (relative to ctx.tmp) that must not exist afterwards."""
    check: Callable[[Context], None] | None = None
    """More to check afterwards (e.g. that the records are the earlier run's alone)."""
    slow: bool = False
    """Left to the slow suite: one more case of a kind the fast rows already cover, at seconds apiece."""


def row_params(rows: list[BadInput]) -> list:
    """`rows` as pytest parameters named by their ids, the `slow` ones marked slow."""
    return [pytest.param(row, id=row.id, marks=[pytest.mark.slow] if row.slow else []) for row in rows]


EVAL = ["run", "--tasks", "kv", "--num_examples", "2", "--num_keys", "2", "--max_new_tokens", "2", "--no_progress"]
EVAL += ["--no_report"]


TINY_SEARCH = str(ROOT / "configs" / "search" / "tiny.yaml")


def tmp_args(ctx: Context, args) -> list[str]:
    return [arg.replace("{tmp}", str(ctx.tmp)) for arg in args]


def damaged_weights(damage: Callable[[bytes], bytes]) -> Callable[[Path], Path]:
    """A tiny model whose model.safetensors is `damage`d (truncated, overwritten)."""

    def make(tmp: Path) -> Path:
        path = repo_model(tmp, "damaged")
        weights = path / "model.safetensors"
        weights.write_bytes(damage(weights.read_bytes()))
        return path

    return make


def gpt2_model(tmp: Path) -> Path:
    """A real tiny GPT-2 (absolute positions, `transformer.h`): no RoPE layers to scale."""
    from transformers import GPT2Config, GPT2LMHeadModel

    path = tmp / "gpt2_model"
    config = GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=2, bos_token_id=1, eos_token_id=1)
    GPT2LMHeadModel(config).save_pretrained(path)
    return with_tokenizer(path)


def scale_json(num_layers: int = 4, **changes) -> dict:
    """A complete scale file of a 3-point Bézier curve whose scales follow it, then `changes`."""
    from evaluation.methods.lpes.curves import curve_scales

    points = [[0.0, 1.2], [2.0, 1.9], [3.0, 1.4]]
    scales = curve_scales("bezier", [p[0] for p in points], [p[1] for p in points], num_layers).tolist()
    data = {
        "format_version": 1,
        "num_layers": num_layers,
        "curve": {"type": "bezier", "degree": 2},
        "control_points": points,
        "scales": scales,
        "fitness": {"overall": 0.5, "per_subset": {"begin": 0.5, "middle": 0.5, "end": 0.5}},
        "model": {"name": "tiny", "config_sha256": "0" * 64},
        "search": {"ga": {}, "seed": 0, "weights": {}, "data_sha256": "0", "generations": 1, "wall_time_s": 1.0},
    }
    return {**data, **changes}


def scale_file_at(data: dict) -> Callable[[Context], Path]:
    def make(ctx: Context) -> Path:
        path = ctx.tmp / "scales" / "s.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data))
        return path

    return make


def file_at(name: str, data: str | bytes) -> Callable[[Context], Path]:
    def make(ctx: Context) -> Path:
        path = ctx.tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        (path.write_bytes if isinstance(data, bytes) else path.write_text)(data)
        return path

    return make


def tree_bytes(root: Path) -> dict[str, bytes | None]:
    """Every path under `root` (relative) -> its bytes (None for a directory): a tree to compare before/after."""
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


@contextmanager
def address_space_cap(extra: int = 2 * 2**30):
    """Limit this process to its current address space + `extra` bytes for the block (soft RLIMIT_AS).

    A regression that builds a full-size model from a bad input then fails
    with an allocation error within a second instead of eating the machine.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    current = int(Path("/proc/self/statm").read_text().split()[0]) * resource.getpagesize()
    cap = current + extra if hard == resource.RLIM_INFINITY else min(current + extra, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


#: Linux capabilities that let root read, write and enter whatever the file modes say: CAP_DAC_OVERRIDE (1),
#: CAP_DAC_READ_SEARCH (2).
_FILE_MODE_OVERRIDES = (1 << 1) | (1 << 2)


def drop_file_mode_overrides() -> None:
    """This process, from now on, obeys file modes as its owner uid does, even as root (capset(2)): both the
    effective and the permitted set lose the overrides, so `os.access` answers as it would for a plain user.
    Irreversible: call it in a forked child only."""

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    libc = ctypes.CDLL(None, use_errno=True)
    header, data = Header(0x20080522, 0), (Data * 2)()  # _LINUX_CAPABILITY_VERSION_3: two 32-bit words
    if libc.capget(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capget failed")
    data[0].effective &= ~_FILE_MODE_OVERRIDES
    data[0].permitted &= ~_FILE_MODE_OVERRIDES
    data[0].inheritable &= ~_FILE_MODE_OVERRIDES
    if libc.capset(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capset failed")


def run_cli_as_plain_user(cli: str, argv: list[str]) -> tuple[int, str]:
    """(exit code, stderr) of `run_cli(cli, argv)` in a forked child that has dropped root's file-mode
    overrides (`drop_file_mode_overrides`): a file of mode 0 is then unreadable to it, as to any user who is
    not its owner with read permission. Forked, so the imports already made cost nothing."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code, err = 99, io.StringIO()
        try:
            os.close(read_end)
            drop_file_mode_overrides()
            sys.stderr = err
            with address_space_cap():
                code = run_cli(cli, argv)
        except BaseException:  # noqa: BLE001  (a traceback is what the row must fail on: hand it to the parent)
            import traceback

            traceback.print_exc(file=err)
        finally:
            with os.fdopen(write_end, "w") as out:
                out.write(json.dumps([code, err.getvalue()]))
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as result:
        text = result.read()
    os.waitpid(pid, 0)
    code, err = json.loads(text)
    return code, err


def run_cli(cli: str, argv: list[str]) -> int:
    try:
        return importlib.import_module(CLIS[cli]).main(argv)
    except SystemExit as stop:  # argparse
        return int(stop.code or 0)


def refused_in_one_line(
    cli: str, argv: list[str], root: Path, code: int, phrase: str, capsys, monkeypatch, plain_user: bool = False
) -> None:
    """`python -m CLI ARGV` (in-process, under `address_space_cap`; `plain_user`: in a forked child without
    root's file-mode overrides) exits with `code` and one stderr line `...error: ...` holding `phrase`, and
    leaves every file under `root` as it was, none added or removed."""
    before = tree_bytes(root)
    monkeypatch.setattr(sys, "argv", [f"python -m {cli}"])
    capsys.readouterr()
    if plain_user:
        got, err = run_cli_as_plain_user(cli, argv)
    else:
        with address_space_cap():
            got = run_cli(cli, argv)
        err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert got == code, err
    assert len(lines) == 1 and "error:" in lines[0], err
    assert phrase in lines[0], lines[0]
    after = tree_bytes(root)
    assert {k: v for k, v in after.items() if k in before} == before, "a file that was there changed"
    assert set(after) == set(before), f"files were added or removed: {set(after) ^ set(before)}"


@contextmanager
def context_in(tmp: Path):
    """A `Context` in `tmp` (made if missing) whose lock holders are released when the block ends."""
    tmp.mkdir(parents=True, exist_ok=True)
    context = Context(tmp)
    try:
        yield context
    finally:
        context.release_all()
        context.restore_modes()


def check_row(row: BadInput, tmp: Path, capsys, monkeypatch) -> None:
    """Run one row in `tmp`: refused in one line with the row's code and phrase, files unchanged, `absent`
    absent, and the row's own `check` passed."""
    with context_in(tmp) as ctx:
        argv = row.setup(ctx)
        phrase, plain_user = row.phrase.replace("{tmp}", str(ctx.tmp)), bool(ctx.denied)
        refused_in_one_line(row.cli, argv, ctx.tmp, row.code, phrase, capsys, monkeypatch, plain_user)
        if row.absent is not None:
            assert not (ctx.tmp / row.absent).exists()
        if row.check is not None:
            row.check(ctx)


def full_disk_on(monkeypatch, module, name_part: str) -> None:
    """`open` in `module` gives files whose writes fail with ENOSPC when the file name contains `name_part`."""

    class FullDisk:
        def __init__(self, handle):
            self._handle = handle

        def write(self, text):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        def __getattr__(self, name):
            return getattr(self._handle, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self._handle.close()

    def fake_open(file, mode="r", *args, **kwargs):
        handle = open(file, mode, *args, **kwargs)  # noqa: SIM115  (closed by FullDisk)
        return FullDisk(handle) if name_part in Path(file).name and set(mode) & set("wa") else handle

    monkeypatch.setattr(module, "open", fake_open, raising=False)


#: A YAML file of nested aliases: a few lines that stand for ten million values.
ALIAS_BOMB = "".join(
    [
        "a: &a [x, x, x, x, x, x, x, x, x, x]\n",
        *(f"{n}: &{n} [{', '.join([f'*{p}'] * 10)}]\n" for p, n in zip("abcde", "bcdef", strict=True)),
        "g: [" + ", ".join(["*f"] * 10) + "]\n",
    ]
)  # 10^7 values once expanded, from 7 short lines


def edited_model(name: str, edit: Callable[[Path], None]) -> Callable[[Path], Path]:
    """A tiny model directory (weights, config.json, byte tokenizer) called `name`, then `edit(directory)`."""

    def make(tmp: Path) -> Path:
        path = repo_model(tmp, name)
        edit(path)
        return path

    return make


def garbage(name: str, data: bytes = b"\xff\xd8\xff\xe0 not this file {") -> Callable[[Path], None]:
    """An edit that replaces the directory's file `name` with `data` (binary garbage by default)."""
    return lambda path: (path / name).write_bytes(data)


def tokenizer_with_own_code(path: Path) -> None:
    """tokenizer_config.json names a class of the directory's own code (auto_map), as custom-code models do."""
    config = json.loads((path / "tokenizer_config.json").read_text())
    config.update(auto_map={"AutoTokenizer": ["tokenization_mine.MineTokenizer", None]}, tokenizer_class="Mine")
    (path / "tokenizer_config.json").write_text(json.dumps(config))


#: A hub id as a user copies it from a model's page: not a local directory.
HUB_ID = "allenai/OLMo-2-0425-1B"


def denying(setup: Callable[[Context], list[str]], *names: str) -> Callable[[Context], list[str]]:
    """`setup`, then the files (or folders) `names` under ctx.tmp made unreadable (`Context.deny_reading`)."""

    def make(ctx: Context) -> list[str]:
        argv = setup(ctx)
        for name in names:
            ctx.deny_reading(ctx.tmp / name)
        return argv

    return make
