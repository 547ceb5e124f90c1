"""The main command end to end, at the smallest settings: every step runs and the report is written."""

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from interrupt import sigint_as_in_a_terminal

from workflows.assets import TINY_KV_BASE
from workflows.commands import _shown_interpreter
from workflows.quickstart import command, loop_file, options, tiny_loop

ROOT = Path(__file__).resolve().parents[1]
#: The interpreter as the quickstart's commands.sh writes it (run from ROOT).
PYTHON = _shown_interpreter(ROOT)
#: The quickstart as a user types it.
QUICKSTART = [sys.executable, "-m", "workflows", "quickstart"]


#: The smallest quickstart that still shows the base's lost middle.
SMALL = ["--steps", "4", "--eval_examples", "10", "--generations", "0", "--population", "4"]


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    """One uninterrupted quickstart at SMALL settings: its output directory."""
    out = tmp_path_factory.mktemp("quickstart") / "qs"
    result = subprocess.run(
        [*QUICKSTART, "--out", str(out), *SMALL],
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    return out


@pytest.mark.slow  # the quickstart in a subprocess
def test_quickstart_runs_the_whole_loop_and_its_base_loses_the_middle(small_run):
    out = small_run
    report = (out / "README.md").read_text()
    for piece in ("eval/base/report.md", "eval/repo/report.md", "scales/base-kv.json", "commands.sh"):
        assert piece in report
    header = "| model | method | task | questions (prompts) | accuracy [95% CI] | middle | edges | Δ [95% CI] |"
    assert header in report and "| base | baseline | kv | 10 (80) |" in report and "| repo | baseline |" in report
    assert "| base | lpes (base-kv) |" in report and "| base | caliope (hourglass, delta=0–0.25) |" in report
    assert "| rope | baseline |" in report and "| base-fim | fim (dummy=blank) |" in report
    verdicts = [line.split("|")[10].strip() for line in report.splitlines() if line.startswith("| base | ")]
    assert verdicts[0] == "baseline" and set(verdicts[1:]) <= {"helps", "hurts", "no measurable change", "identical"}
    # the shipped base has a lost middle: at least 0.20 below its edges, the intervals apart
    base = json.loads((out / "eval" / "base" / "summary.json").read_text())["results"]["kv"]["baseline"]
    assert base["middle_accuracy"] <= base["edges_accuracy"] - 0.20
    assert base["middle_accuracy_ci"][1] < base["edges_accuracy_ci"][0]
    assert (out / "repo_positions_last_layer.png").is_file()
    # REPO's learned positions in a sentence a reader cannot miss, and both continued models against the base
    # the shipped pair (600 steps each) continued for 4 more: REPO's positions have spread (assets' pair.json)
    assert (
        "**REPO's positions learned in 604 steps**" in report and "the shipped pair `tiny-kv-dip-continued`" in report
    )
    assert "**Against the base they came from, accuracy changed by RoPE " in report
    table = report[report.index("## The continued models against the base they came from") :]
    assert "| rope | " in table and "| repo | " in table and "Δ middle vs the base" in table
    assert (out / "eval" / "base" / "accuracy_by_position_kv.png").is_file()
    methods = set(json.loads((out / "eval" / "base" / "summary.json").read_text())["results"]["kv"])
    assert {"baseline", "pcd:alpha=0.2,beta=2.5,ratio=0.0001,gamma=30"} <= methods
    assert any(m.startswith("lpes:") for m in methods) and sum(m.startswith("caliope:") for m in methods) == 3
    fim = json.loads((out / "eval" / "base-fim" / "summary.json").read_text())["results"]["kv"]
    assert any(m.startswith("fim:") for m in fim)
    assert (out / "models" / "repo" / "tokenizer.json").is_file()
    commands = (out / "commands.sh").read_text()
    assert "python -m repo_train fit" in commands and "python -m search run" in commands
    full_scale = report[report.index("## The same at full scale") :]  # commands that run as printed: no <...>
    assert "quickstart --config configs/quickstart/olmo2-1b.yaml --dry_run" in full_scale and "<" not in full_scale
    config = yaml.safe_load((out / "configs" / "train-repo.yaml").read_text())
    assert config["model"]["init_from"].endswith("workflows/assets/tiny-kv-dip-continued/repo")
    assert config["model"]["position"] == "repo"  # learned predictors: no curriculum handing over from RoPE again
    assert config["data"]["train"]["class_path"] == "repo_train.data.PromptCompletionData"


def _steps(out: Path) -> dict:
    path = out / "steps.json"
    try:
        return json.loads(path.read_text())["steps"] if path.is_file() else {}
    except ValueError:  # not there yet (written atomically, so never torn)
        return {}


def _without_times(report: str) -> str:
    """The report without wall times (the only part a resumed run may change)."""
    lines = [line for line in report.splitlines() if not line.startswith(("Built in", "- "))]
    return "\n".join(lines)


@pytest.mark.slow  # the quickstart in a subprocess
def test_quickstart_refuses_a_missing_base(tmp_path):
    result = subprocess.run(
        [*QUICKSTART, "--out", str(tmp_path / "qs"), "--base", str(tmp_path / "nowhere")],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode != 0 and "is not an HF model directory" in result.stderr


# --- config mode: `--config FILE` runs the same loop with launchers, checkpoints and evaluation from a file

FULL_SCALE = "configs/quickstart/olmo2-1b.yaml"


def quickstart(*args, cwd=ROOT, timeout=120):
    """Run the quickstart; return the finished process."""
    return subprocess.run(
        [*QUICKSTART, *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.mark.slow  # the quickstart in a subprocess
def test_full_scale_config_dry_run_writes_every_command_and_runs_nothing(tmp_path):
    out = tmp_path / "dry"
    result = quickstart("--config", FULL_SCALE, "--dry_run", "--out", out)
    assert result.returncode == 0, result.stderr[-3000:]
    commands = (out / "commands.sh").read_text()
    steps = [
        (
            "scripts/launch_train.sh configs/train/olmo2-1b-stage2-rope.yaml --trainer.default_root_dir "
            f"{out}/runs/rope --model.init_from checkpoints/OLMo-2-0425-1B-stage1-step1907359"
        ),
        (
            f'python -m repo_train export --checkpoint "$({PYTHON} -c {shlex.quote(loop_file.NEWEST_CHECKPOINT)} '
            f'{out}/runs/rope)" --out {out}/models/rope'
        ),
        "scripts/launch_train.sh configs/train/olmo2-1b-stage2-repo.yaml",
        (
            f'python -m repo_train export --checkpoint "$({PYTHON} -c {shlex.quote(loop_file.NEWEST_CHECKPOINT)} '
            f'{out}/runs/repo)" --out {out}/models/repo'
        ),
        f"scripts/run_search.sh --model.path {out}/models/rope --config configs/search/lpes.yaml --out {out}/scales/rope.json",
        f"scripts/run_evaluation.sh --model {out}/models/rope --tasks mdqa_release,kv",
        (
            f'--methods lpes:scale_file={out}/scales/rope.json --methods "pi:scale=$({PYTHON} -c '
            f'{shlex.quote(loop_file.MEAN_SCALE)} {out}/scales/rope.json)"'
        ),
        f"scripts/run_evaluation.sh --model {out}/models/repo",
        "scripts/run_evaluation.sh --model checkpoints/OLMo-2-0425-1B-stage1-step1907359",
        f"python -m evaluation report --out {out}/eval/rope --compare {out}/eval/repo --compare {out}/eval/base",
    ]
    positions = [commands.index(step) for step in steps]  # each present, in this order
    assert positions == sorted(positions)
    assert commands.count("--device cuda") == 3 and "Dry run" in commands
    assert commands.count("--example_offset 700 ") == 3 and "../" not in commands  # disjoint; no outside path
    assert all(step.split(" --")[0] in result.stdout for step in steps)  # printed too
    assert sorted(p.name for p in out.iterdir()) == ["commands.sh"]  # nothing ran
    # the base exists only on the GPU machine: a warning here, a one-line refusal for a real run
    assert "OLMo-2-0425-1B-stage1-step1907359 is not an HF model directory" in result.stderr
    real = quickstart("--config", FULL_SCALE, "--out", tmp_path / "real")
    assert real.returncode == 1 and "base: checkpoints/OLMo-2-0425-1B-stage1-step1907359" in real.stderr
    assert "Traceback" not in real.stderr and not (tmp_path / "real").exists()


def write_tiny_loop_config(tmp_path, **changes) -> Path:
    """A config-mode loop on the built-in tiny base: 3 CPU steps per model, a one-generation search, 1 example."""
    from evaluation.tasks import build_task
    from workflows.commands import cpu_trainer_section

    base = TINY_KV_BASE
    kv = dict(num_keys=8, key_chars=1, template="pairs")
    data = tmp_path / "kv-train.jsonl"
    rows = build_task("kv", **kv, num_examples=16, gold_positions="all", seed=1000).rows()
    data.write_text("".join(json.dumps({"prompt": r["prompt"], "completion": r["value"]}) + "\n" for r in rows))
    methods = {}
    for method in ("rope", "repo"):
        train = {
            "trainer": cpu_trainer_section(3, tmp_path / "unused", log_every_n_steps=1, enable_progress_bar=False),
            "model": {"position": method, "lr": 1e-3, "warmup_steps": 0},
            "data": {
                "train": {
                    "class_path": "repo_train.data.PromptCompletionData",
                    "init_args": {"paths": [str(data)], "tokenizer": str(base), "seq_len": 32},
                },
                "global_batch_size": 8,
                "micro_batch_size": 8,
            },
            "checkpoint": {"every_n_train_steps": 3},
        }
        methods[method] = tmp_path / f"train-{method}.yaml"
        methods[method].write_text(yaml.safe_dump(train))
    search = {
        "task": {"name": "kv", "num_items": 8, "num_examples": 2, "seed": 2000, "max_new_tokens": 1, "batch_size": 8,
                 "key_chars": 1, "template": "pairs"},
        "space": {"num_points": 3},
        "ga": {"population": 4, "parents": 2, "generations": 0, "mutation_offspring": 1, "crossover_offspring": 1},
        "held_out": {"num_examples": 2},
    }  # fmt: skip
    (tmp_path / "search.yaml").write_text(yaml.safe_dump(search))
    config = {
        "base": str(base),
        "train": {
            "launcher": ["{python}", "-m", "repo_train", "fit", "--config"],
            "methods": {name: str(path) for name, path in methods.items()},
            "args": ["--trainer.logger", "false"],
        },
        "search": {"model": "rope", "launcher": ["{python}", "-m", "search", "run"],
                   "config": str(tmp_path / "search.yaml"), "args": ["--no_progress"]},
        "evaluate": {
            "args": ["--tasks", "kv", "--num_keys", 8, "--num_examples", 1, "--task_param", "kv:key_chars=1",
                     "--task_param", "kv:template=pairs", "--seed", 3000, "--gold_positions", "all",
                     "--batch_size", 64, "--no_progress"],
            "methods": {"rope": ["baseline", "lpes:scale_file={scale_file}", "pi:scale={mean_scale}"],
                        "repo": ["baseline"], "base": ["baseline"]},
        },
    }  # fmt: skip
    for key, value in changes.items():
        section, _, name = key.partition("__")
        (config[section] if name else config).update({name or section: value})
    path = tmp_path / "loop.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


#: The steps of a loop file's run, in order (OUT/steps.json keys), for the tiny loop file below.
LOOP_STEPS = ["train-rope", "export-rope", "train-repo", "export-repo", "search", "eval-rope", "eval-repo",
              "eval-base"]  # fmt: skip


@pytest.fixture(scope="module")
def config_loop_run(tmp_path_factory):
    """(loop file, output directory) of one uninterrupted config-mode run of the tiny loop file."""
    where = tmp_path_factory.mktemp("loop")
    loop_file = write_tiny_loop_config(where)
    result = quickstart("--config", loop_file, "--out", where / "qs", timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return loop_file, where / "qs"


@pytest.mark.slow  # the quickstart in a subprocess
def test_config_mode_runs_the_loop_on_cpu(config_loop_run):
    out = config_loop_run[1]
    report = (out / "README.md").read_text()
    for row in ("| rope | baseline | kv |", "| rope | lpes (rope) |", "| rope | pi (scale=", "| repo | baseline | kv |",
                "| base | baseline | kv |"):  # fmt: skip
        assert row in report
    assert "The loop of `" in report and "tiny base" not in report and "scripts/analyze_repo_positions.py" in report
    assert (out / "scales" / "rope.json").is_file() and (out / "models" / "repo" / "tokenizer.json").is_file()
    assert list((out / "runs" / "repo").rglob("last.ckpt"))
    commands = (out / "commands.sh").read_text()
    steps = ["# train rope", "-m repo_train fit --config", "# export the rope checkpoint", "# train repo",
             "# export the repo checkpoint", "# LPES search on the rope model", "-m search run --model",
             "# evaluate the rope model", "# evaluate the repo model", "# evaluate the base model",
             "# one plot: every evaluated model and method"]  # fmt: skip
    positions = [commands.index(step) for step in steps]
    assert positions == sorted(positions) and "--trainer.logger false" in commands
    mean = json.loads((out / "scales" / "rope.json").read_text())["scales"]
    assert f"--methods pi:scale={sum(mean) / len(mean):.6g} " in commands


@pytest.mark.slow  # the quickstart killed in each of its steps, then rerun to the end
def test_killed_in_each_step_the_rerun_finishes_with_the_same_report_and_redoes_no_finished_step(
    tmp_path, config_loop_run
):
    import signal
    import time

    loop_file, reference_out = config_loop_run
    argv = [*QUICKSTART, "--config", str(loop_file), "--out", str(tmp_path / "qs")]
    out = tmp_path / "qs"
    first_done: dict[str, str] = {}  # step key -> the run id it finished with (a rerun would change it)

    def check_finished(records: dict, keys: list[str]) -> None:
        for done in keys:
            assert records[done]["status"] == "done", (done, records[done])
            assert records[done]["run_id"] == first_done.setdefault(done, records[done]["run_id"]), f"{done} reran"

    for number, key in enumerate(LOOP_STEPS):
        process = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
            preexec_fn=sigint_as_in_a_terminal,  # noqa: PLW1509 (one signal call)
        )  # fmt: skip
        deadline = time.monotonic() + 600
        while _steps(out).get(key, {}).get("status") != "running":
            assert process.poll() is None, f"ended before step {key}: {process.stdout.read()[-3000:]}"
            assert time.monotonic() < deadline, f"step {key} never started"
            time.sleep(0.05)
        time.sleep(0.5)  # inside the step
        how = signal.SIGINT if number % 2 == 0 else signal.SIGKILL
        process.send_signal(how)
        printed = process.communicate(timeout=120)[0]
        records = _steps(out)
        assert records[key]["status"] in {"running", "interrupted"}, (key, records[key], printed[-2000:])
        if how == signal.SIGINT:  # Ctrl-C: one line saying how to go on, the step recorded as interrupted
            assert process.returncode == 1 and "rerun the same command to go on from here" in printed
            assert "Traceback" not in printed and records[key]["status"] == "interrupted"
        check_finished(records, LOOP_STEPS[:number])
        assert all(f"--- {records[k]['title']}: skip" in printed for k in LOOP_STEPS[: max(0, number - 1)])
        if number:  # the step killed last time went on with its own mechanism, or afresh when it had none
            killed_before = records[LOOP_STEPS[number - 1]]["title"]
            assert f"--- {killed_before}: resume" in printed or f"--- {killed_before}: rerun" in printed
    final = subprocess.run(argv, capture_output=True, text=True, timeout=900, check=False, cwd=ROOT)
    assert final.returncode == 0, final.stdout[-3000:] + final.stderr[-3000:]
    records = _steps(out)
    assert {r["status"] for r in records.values()} == {"done"} and list(records) == LOOP_STEPS
    check_finished(records, LOOP_STEPS[:-1])
    reference = (reference_out / "README.md").read_text().replace(str(reference_out), "OUT")
    assert _without_times((out / "README.md").read_text().replace(str(out), "OUT")) == _without_times(reference)
    for name in ("rope", "repo", "base"):
        records_text = (out / "eval" / name / "records.jsonl").read_text().replace(str(out), "OUT")
        assert records_text == (reference_out / "eval" / name / "records.jsonl").read_text().replace(
            str(reference_out), "OUT"
        )


@pytest.mark.slow  # the quickstart in a subprocess
def test_config_errors_name_the_key_or_file(tmp_path):
    cases = {
        "unknown key 'train.lancher'": dict(train__lancher=["x"]),
        "train.methods.rope: configs/train/no-such.yaml does not exist": dict(
            train__methods={"rope": "configs/train/no-such.yaml", "repo": str(tmp_path / "train-repo.yaml")}
        ),
    }  # the other mistakes are checked in process (test_loop_file_mistakes_in_process), which is the same code
    for i, (message, change) in enumerate(cases.items()):
        result = quickstart("--config", write_tiny_loop_config(tmp_path, **change), "--out", tmp_path / f"out{i}")
        assert result.returncode == 2 and message in result.stderr, (message, result.stderr[-2000:])
        assert "Traceback" not in result.stderr and not (tmp_path / f"out{i}").exists()
    # relative --config paths are taken from the repository root, whatever the current directory
    no_file = quickstart("--config", "configs/quickstart/nowhere.yaml", "--dry_run", cwd=tmp_path)
    assert no_file.returncode == 2 and f"no config file at {ROOT / 'configs/quickstart/nowhere.yaml'}" in no_file.stderr
    assert "Traceback" not in no_file.stderr


@pytest.mark.slow  # the quickstart in a subprocess
def test_config_refuses_tiny_options(tmp_path):
    result = quickstart("--config", FULL_SCALE, "--steps", "10", "--dry_run", "--out", tmp_path / "x")
    assert result.returncode == 2 and "--steps: built-in tiny loop only" in result.stderr
    assert not (tmp_path / "x").exists()


def test_full_scale_dry_run_plan_in_process(tmp_path, capsys):
    """The dry run's plan: torchrun on every GPU for training, the search and every evaluation, bf16, the
    evaluation's questions after the search's, an estimate per step; nothing written but commands.sh."""
    out = tmp_path / "dry"
    args = options.parse_args(["--config", FULL_SCALE, "--dry_run", "--out", str(out), "--data_dir", str(tmp_path)])
    command.run_config(args, out)
    printed = capsys.readouterr().out
    plan = printed[printed.index("plan (") :].splitlines()[2:10]
    assert [line.split("  ")[1] for line in plan] == [
        "train rope", "export the rope checkpoint", "train repo", "export the repo checkpoint",
        "LPES search on the rope model", "evaluate the rope model", "evaluate the repo model",
        "evaluate the base model",
    ]  # fmt: skip
    for line in plan:
        assert " run " in line and "not run before" in line
        if "export" not in line:
            assert "8 processes on 8 GPUs, " in line and (" h " in line or " min (" in line), line
    # training: fit's own plan, memory by the memory model and hours from the measured throughput
    assert "peak ≈ " in plan[0] and "tokens/s per GPU (measured, NVIDIA H200, 2026-11-28)" in plan[0]
    assert "training plan of repo (configs/train/olmo2-1b-stage2-repo.yaml):" in printed
    assert "examples: the search uses mdqa fitness 0-199, held-out 200-699 (seed 0); every evaluation uses " \
        "700-1199 (--example_offset 700)" in printed  # fmt: skip
    assert all("bfloat16 (--dtype auto)" in line for line in plan[5:])
    assert "MDQA: the release's own prompts (mdqa_release" in printed and "as Liu et al. measured" in printed
    commands = (out / "commands.sh").read_text()
    assert commands.count("NPROC_PER_NODE=8 scripts/run_evaluation.sh") == 3
    assert commands.count("--tasks mdqa_release,kv ") == 3  # the paper's prompts, by default
    assert (
        "NPROC_PER_NODE=8 scripts/run_search.sh" in commands and "NPROC_PER_NODE=8 scripts/launch_train.sh" in commands
    )
    assert commands.count("--example_offset 700 ") == 3 and f"--data_dir {tmp_path} " in commands
    assert sorted(p.name for p in out.iterdir()) == ["commands.sh"]


def test_search_args_decide_the_example_ranges(tmp_path, capsys):
    """A loop file's search.args that change the search's examples move the evaluations past them, in the dry
    run's ranges and in the commands alike (they were read from the search config alone)."""
    config = yaml.safe_load((ROOT / FULL_SCALE).read_text())
    config["search"]["args"] += ["--held_out.num_examples", "800"]
    path = tmp_path / "held-out-800.yaml"
    path.write_text(yaml.safe_dump(config))
    out = tmp_path / "o"
    command.run_config(options.parse_args(["--config", str(path), "--dry_run", "--out", str(out), "--data_dir",
                                           str(tmp_path)]), out)  # fmt: skip
    printed = capsys.readouterr().out
    assert "held-out 200-999 (seed 0); every evaluation uses 1000-1499 (--example_offset 1000)" in printed
    assert (out / "commands.sh").read_text().count("--example_offset 1000 ") == 3


def test_evaluations_that_share_the_node_in_the_dry_run_plan(tmp_path, capsys):
    """evaluate.at_once: 2 on 8 GPUs: each evaluation on its own 4 GPUs, in the plan and in commands.sh."""
    config = yaml.safe_load((ROOT / FULL_SCALE).read_text())
    config["evaluate"]["at_once"] = 2
    path = tmp_path / "shared.yaml"
    path.write_text(yaml.safe_dump(config))
    args = options.parse_args(
        ["--config", str(path), "--dry_run", "--out", str(tmp_path / "o"), "--data_dir", str(tmp_path)]
    )
    command.run_config(args, tmp_path / "o")
    printed = capsys.readouterr().out
    plan = [line for line in printed[printed.index("plan (") :].splitlines() if "evaluate the" in line]
    assert "4 processes on GPUs 0-3 (2 evaluations at once), bfloat16" in plan[0]
    assert "4 processes on GPUs 4-7 (2 evaluations at once)" in plan[1] and "GPUs 0-3" in plan[2]
    commands = (tmp_path / "o" / "commands.sh").read_text()
    assert (
        commands.count("NPROC_PER_NODE=4 CUDA_VISIBLE_DEVICES=0,1,2,3 MASTER_PORT=29500 scripts/run_evaluation.sh") == 2
    )
    assert (
        commands.count("NPROC_PER_NODE=4 CUDA_VISIBLE_DEVICES=4,5,6,7 MASTER_PORT=29501 scripts/run_evaluation.sh") == 1
    )
    assert "NPROC_PER_NODE=8 scripts/launch_train.sh" in commands  # training keeps the whole node


def test_options_parse_in_process(capsys, tmp_path):
    """The quickstart's check in the fast suite (the tests above run the command in subprocesses: slow suite)."""
    assert options.parse_args([]).out == "outputs/quickstart"
    assert options.parse_args([]).pair == str(options.PAIR)  # the built-in base continues the shipped pair ...
    assert options.parse_args(["--base", str(TINY_KV_BASE)]).pair == "none"  # ... another starts fresh
    assert tiny_loop.pair_history(options.PAIR)["steps"] >= 100
    with pytest.raises(SystemExit):
        options.parse_args(["--pair", str(tmp_path)])
    assert "needs rope/ and repo/ HF directories" in capsys.readouterr().err
    assert options.parse_args(["--config", FULL_SCALE]).out == "outputs/quickstart-olmo2-1b"
    with pytest.raises(SystemExit):
        options.parse_args(["--config", FULL_SCALE, "--steps", "10"])
    assert "--steps: built-in tiny loop only" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        options.parse_args(["--gpus", "8"])
    assert "--gpus: loop file only (--config FILE)" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (dict(train__lancher=["x"]), "unknown key 'train.lancher'"),
        (dict(search__config=None), "missing key 'search.config'"),
        (dict(search__model="repo2"), "search.model: 'repo2' is not one of rope, repo, base"),
        (dict(search__args=["--data_dir", "{scale_file}"]), "search.args[1]: unknown placeholder {scale_file}"),
        (dict(evaluate__methods={"rpoe": ["pcd"]}), "evaluate.methods.rpoe: not a model; use one of rope, repo, base"),
        (dict(train__args=["--model.init_from", "x"]), "train.args: --model.init_from is set by the loop itself"),
        (dict(evaluate__args=["--seed", "{nope}"]), "evaluate.args[1]: unknown placeholder {nope}"),
        (
            dict(evaluate__args=["--seed", "{out:>99999999999}"]),
            "evaluate.args[1]: placeholder {out:>99999999999} in '{out:>99999999999}' has a format spec",
        ),
        (dict(search__args=["--data_dir", "x{base!r}"]), "search.args[1]: placeholder {base!r} in 'x{base!r}' has"),
        (dict(train__launcher=["{python:d}"]), "train.launcher[0]: placeholder {python:d} in '{python:d}' has"),
        (dict(train__methods={"base": "x.yaml"}), "train.methods.base: rename it"),
        (dict(search__args=["--data_dir", "{data_dir}"]), "data_dir: not set, but the arguments use {data_dir}"),
        (dict(evaluate__args=["--example_offset", "3"]), "evaluate.args: --example_offset is set by the loop"),
        (dict(gpus=0), "gpus"),
        (dict(evaluate__at_once=3), "evaluate.at_once: must divide gpus (1) into equal slices"),
        (  # a value beside a placeholder is judged now, not after training and the search
            dict(evaluate__methods={"rope": ["pi:scale={mean_scale}+pcd:gamma=-5"]}),
            "evaluate.args / evaluate.methods.rope: pcd: gamma (top tokens kept) must be >= 1, got -5",
        ),
        (
            dict(evaluate__methods={"rope": ["lpes:scale_file={scale_file}+ms_poe:min_ratio=2,max_ratio=1"]}),
            "ms_poe: max_ratio must be >= min_ratio=2, got 1.0",
        ),
        (
            dict(evaluate__methods={"rope": ["lpes:scale_fille={scale_file}"]}),
            "unknown parameter(s) ['scale_fille'] for method 'lpes'",
        ),
        (
            dict(train__args=["--trainer.max_steps", "abc"]),
            "train-rope.yaml) with train.args: --trainer.max_steps: 'abc' is not valid (expected int)",
        ),
    ],
)
def test_loop_file_mistakes_in_process(tmp_path, capsys, change, message):
    """The loop file's sections are checked when parsed: one line naming the key, exit code 2, nothing run."""
    with pytest.raises(SystemExit) as stop:
        options.parse_args(["--config", str(write_tiny_loop_config(tmp_path, **change)), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "o").exists()


def test_a_train_config_typo_is_refused_before_the_first_run_trains(tmp_path, capsys):
    """The second run's LightningCLI config is parsed as `fit` would parse it before the first run starts."""
    path = write_tiny_loop_config(tmp_path)
    train = yaml.safe_load((tmp_path / "train-repo.yaml").read_text())
    train["trainer"]["max_stepz"] = train["trainer"].pop("max_steps")
    (tmp_path / "train-repo.yaml").write_text(yaml.safe_dump(train))
    with pytest.raises(SystemExit) as stop:
        options.parse_args(["--config", str(path), "--dry_run", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and len(err.strip().splitlines()) == 1, err
    assert "train.methods.repo (" in err and "does not accept option 'trainer.max_stepz'" in err
    assert not (tmp_path / "o").exists()


def test_a_loop_file_parses_into_its_sections_and_prints_resolved(tmp_path, capsys):
    args = options.parse_args(["--config", str(write_tiny_loop_config(tmp_path)), "--out", str(tmp_path / "o")])
    assert args.loop.search.model == "rope" and args.loop.train.launcher[0] == "{python}"
    assert args.loop.evaluate.args[3] == "8"  # a YAML number in an argument list is passed on as text
    with pytest.raises(SystemExit) as stop:
        options.parse_args(["--config", str(write_tiny_loop_config(tmp_path)), "--print_config"])
    printed = yaml.safe_load(capsys.readouterr().out)
    assert stop.value.code == 0 and printed["search"]["config"] == str(tmp_path / "search.yaml")
    assert printed["evaluate"]["methods"]["base"] == ["baseline"]


def test_data_a_loop_reads_is_checked_before_training(tmp_path, capsys):
    """Missing shard lists and --data_dir folders are machine problems: fatal for a real run, listed by a dry run."""
    from workflows import loop_checks

    path = write_tiny_loop_config(tmp_path, search__args=["--task.data_dir", str(tmp_path / "no-such-dir")])
    train = yaml.safe_load((tmp_path / "train-rope.yaml").read_text())
    train["data"]["train"] = {"class_path": "OlmoNumpyData", "init_args": {"mix_file": "data/nowhere/mix.txt"}}
    (tmp_path / "train-rope.yaml").write_text(yaml.safe_dump(train))
    args = options.parse_args(["--config", str(path), "--out", str(tmp_path / "o")])
    train["data"]["val"] = {"source": "synthetic", "seq_len": 32}  # the old form, which training refuses ...
    (tmp_path / "train-rope.yaml").write_text(yaml.safe_dump(train))
    with pytest.raises(SystemExit) as stop:  # ... as the loop file is read (fit's own parser)
        options.parse_args(["--config", str(path), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "data.val: the 'source:' form was replaced" in err and err.count("\n") == 1, err
    values = {"out": "o", "base": args.loop.base, "python": sys.executable}
    problems = loop_checks.machine_problems(args.loop, ROOT, values)
    missing = "data.train.init_args.mix_file: data/nowhere/mix.txt does not exist here"
    assert any(missing in p for p in problems), problems
    assert any(f"search.args: --task.data_dir {tmp_path / 'no-such-dir'} is not a directory" in p for p in problems)
    assert any("data.val: the 'source:' form was replaced by class_path + init_args; write" in p for p in problems)
    assert len(problems) == 3  # the base, the launchers and the other run's data are fine
