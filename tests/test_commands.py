"""CommandRunner: any argv (launchers) logged and timed like `python -m` commands; dry runs log without running."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from workflows.commands import CommandRunner, later, logged_train_losses
from workflows.quickstart.loop_file import MEAN_SCALE, NEWEST_CHECKPOINT


def test_run_argv_runs_logs_and_times_any_command(tmp_path):
    run = CommandRunner(tmp_path, description="argv commands", cwd=tmp_path, env={"GREETING": "hi there"})
    seconds = run.run_argv("echo", ["sh", "-c", 'echo "$GREETING" > said.txt'], echo=False)
    run.run_argv("python as a path", [sys.executable, "-c", "print('ok')"], log=tmp_path / "ok.log", echo=False)
    assert seconds >= 0 and [title for title, _ in run.timings] == ["echo", "python as a path"]
    assert (tmp_path / "ok.log").read_text() == "ok\n"
    assert (tmp_path / "said.txt").read_text() == "hi there\n"  # the runner's env reached the command
    script = (tmp_path / "commands.sh").read_text()
    assert "# echo\nGREETING='hi there' sh -c 'echo \"$GREETING\" > said.txt'\n" in script
    assert f"{sys.executable} -c 'print('\"'\"'ok'\"'\"')'" in script  # written as run: shell-quoted, no rewriting
    with pytest.raises(subprocess.CalledProcessError):
        run.run_argv("fail", ["sh", "-c", "exit 3"], log=tmp_path / "fail.log", echo=False)


def test_run_argv_uses_cwd(tmp_path):
    (tmp_path / "sub").mkdir()
    run = CommandRunner(tmp_path / "out", cwd=tmp_path / "sub")
    run.run_argv("where", ["sh", "-c", "pwd > here.txt"], echo=False)
    assert (tmp_path / "sub" / "here.txt").read_text().strip() == str(tmp_path / "sub")


def test_python_module_commands_are_written_with_this_interpreter_and_the_script_runs(tmp_path):
    run = CommandRunner(tmp_path, cwd=tmp_path)
    run("json help", "json.tool", "--help", log=tmp_path / "help.log", echo=False)
    script = tmp_path / "commands.sh"
    text = script.read_text()
    assert f"\n# json help\n{Path(sys.executable).absolute()} -m json.tool --help\n" in text  # not a bare python
    assert f"\ncd {tmp_path.resolve()}\n" in text and "usage" in (tmp_path / "help.log").read_text()
    assert os.access(script, os.X_OK)
    result = subprocess.run([str(script)], capture_output=True, text=True, check=False, env={"PATH": "/usr/bin:/bin"})
    assert result.returncode == 0 and "usage" in result.stdout  # runs as is, without an activated environment


def test_dry_run_writes_and_prints_but_runs_nothing(tmp_path, capsys):
    run = CommandRunner(tmp_path, description="dry", dry_run=True)
    assert run.run_argv("would fail", ["sh", "-c", "touch ran.txt; exit 1"]) == 0.0
    assert run("module", "json.tool", "/no/such/file") == 0.0
    assert not (tmp_path / "ran.txt").exists() and run.timings == []
    script = (tmp_path / "commands.sh").read_text()
    assert script.index("# would fail") < script.index("# module") and "python -m json.tool /no/such/file" in script
    printed = capsys.readouterr().out
    assert "=== would fail\n$ sh -c 'touch ran.txt; exit 1'" in printed and "=== module" in printed


def test_a_dry_run_value_known_later_is_computed_when_its_commands_sh_runs(tmp_path):
    """A dry run writes `$(...)` for what an earlier step makes (`later`), quoted so the rest stays literal; the
    file then runs as written. A real run refuses such a value (it would reach the command unexpanded)."""
    run = CommandRunner(tmp_path, description="dry", cwd=tmp_path, dry_run=True)
    value = later([sys.executable, "-c", "print(1.5)"])
    run.run_argv("print", ["sh", "-c", 'printf "%s|%s\n" "$0" "$1" > said.txt', f"pi:scale={value}", '$HOME `x` "q"'])
    script = tmp_path / "commands.sh"
    subprocess.run(["bash", str(script)], check=True, capture_output=True)
    assert (tmp_path / "said.txt").read_text() == 'pi:scale=1.5|$HOME `x` "q"\n'
    with pytest.raises(ValueError, match="a value known only after a step"):
        CommandRunner(tmp_path / "real").run_argv("real", ["echo", value])


def test_the_dry_run_helpers_compute_what_the_real_run_takes(tmp_path):
    """The quickstart dry run's `$(...)`: the training's newest last.ckpt and the scale file's mean, as printed."""
    ckpt = tmp_path / "runs" / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    ckpt.parent.mkdir(parents=True)
    ckpt.write_bytes(b"x")
    scale = tmp_path / "s.json"
    scale.write_text('{"num_layers": 4, "scales": [1.0, 1.2, 1.4, 1.5]}')
    for code, argument, expected in ((NEWEST_CHECKPOINT, tmp_path / "runs", str(ckpt)), (MEAN_SCALE, scale, "1.275")):
        found = subprocess.run([sys.executable, "-c", code, str(argument)], cwd=Path(__file__).parents[1],
                               capture_output=True, text=True, check=True)  # from the checkout, as commands.sh  # fmt: skip
        assert found.stdout.strip() == expected


def test_last_checkpoint_is_the_newest_last_file_or_directory(tmp_path):
    import os

    from workflows.commands import last_checkpoint

    with pytest.raises(SystemExit, match="no last.ckpt under"):
        last_checkpoint(tmp_path)
    first = tmp_path / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    first.parent.mkdir(parents=True)
    first.write_text("ddp")
    (first.parent / "last-epoch.ckpt").write_text("not a last checkpoint")  # only last / last-vN count
    os.utime(first, (1, 1))
    assert last_checkpoint(tmp_path) == first
    rerun = first.parent / "last-v1.ckpt"
    rerun.mkdir()  # DeepSpeed writes a directory
    assert last_checkpoint(tmp_path) == rerun


def test_logged_train_losses_reads_every_csv_log_by_step(tmp_path):
    first, second = tmp_path / "lightning_logs/version_0", tmp_path / "lightning_logs/version_1"
    first.mkdir(parents=True)
    second.mkdir(parents=True)
    (first / "metrics.csv").write_text("epoch,step,train/loss,val/loss\n0,0,5.5,\n0,1,5.0,\n0,1,,4.9\n0,2,4.5,\n")
    (second / "metrics.csv").write_text("epoch,step,train/loss,val/loss\n0,2,4.4,\n0,3,4.0,\n")  # resumed at step 2
    assert logged_train_losses(tmp_path) == {0: 5.5, 1: 5.0, 2: 4.4, 3: 4.0}
    assert logged_train_losses(tmp_path / "nothing") == {}


def test_logged_train_losses_reads_tensorboard_event_files(tmp_path):
    """The training CLI's default logger is TensorBoard's: its scalars count as well as a CSV log's."""
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(tmp_path / "lightning_logs" / "version_0"))
    for step, loss in ((9, 2.5), (19, 1.25)):
        writer.add_scalar("train/loss", loss, step)
        writer.add_scalar("train/lr", 0.1, step)  # another scalar is not a loss
    writer.close()
    assert logged_train_losses(tmp_path) == {9: 2.5, 19: 1.25}
