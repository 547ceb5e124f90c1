"""`python -m evaluation lm-eval tasks --out DIR`: Lost in the Middle as lm-evaluation-harness tasks.

lm-eval has no Lost-in-the-Middle task, and one lm-eval task gives one score: it cannot stratify a metric by
the gold document's position. So the curve is one task per gold position, grouped: this command builds the rows
with the project's own tasks (`mdqa`, `mdqa_release`, `kv`: the same prompts, ids and answers as
`python -m evaluation run` builds for the same options), writes each position's rows as a jsonl file and a task
YAML reading it, a group per family, one group of all, and copies the release's scores
(`evaluation/litm_scoring.py`, standalone) beside them. `lm_eval run --include_path DIR --tasks GROUP` then
reports the per-position scores with lm-eval's own engines (`hf`, `vllm`, `repo-train`); with `--log_samples`,
`python -m evaluation lm-eval report` turns its per-sample output into this project's summary and report.
"""

from __future__ import annotations

import json
import shlex
import shutil
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from jsonargparse import Namespace

from evaluation.lm_eval_tasks_config import LitmTasks
from evaluation.results import write_json_atomic
from evaluation.sample_data import KV_RETRIEVAL_75_KEYS, NQ_OPEN_ORACLE
from evaluation.tasks.base import Task
from evaluation.tasks.kv_retrieval import KVRetrievalTask
from evaluation.tasks.mdqa import MDQAReleaseTask, MDQATask, release_files
from repo_common.config_cli import ConfigParser, add_dataclass_options, dataclass_config
from repo_common.output_guard import check_output_directory

MANIFEST = "litm_tasks.json"
SCORING_MODULE = Path(__file__).resolve().parent / "litm_scoring.py"
#: What each family's tasks are scored by: the metric's name in lm-eval's output and its `litm_scoring` hook.
SCORES = {
    "mdqa": ("best_subspan_em", "process_mdqa"),
    "mdqa_release": ("best_subspan_em", "process_mdqa"),
    "kv": ("kv_containment", "process_kv"),
}
#: The columns of a written row (every one a column of the project's task rows).
ROW_KEYS = ("id", "example_id", "gold_position", "num_positions", "prompt", "answers")


def add_arguments(parser: ConfigParser) -> None:
    parser.description = __doc__.split("\n\n")[0]
    add_dataclass_options(parser, LitmTasks)


def family_tasks(family: str, options: LitmTasks) -> list[Task]:
    """The project's task(s) whose rows make `family`'s lm-eval tasks; FileNotFoundError when its file is absent."""
    common = {"num_examples": options.num_examples, "example_offset": options.example_offset}
    folder = Path(options.data_dir) if options.data_dir is not None else None
    if family == "mdqa":
        path = MDQATask.find_data_file(folder, {}) if folder is not None else NQ_OPEN_ORACLE
        return [
            MDQATask(
                path=str(path),
                num_documents=options.num_documents,
                gold_positions=options.position_spec,
                seed=options.seed,
                **common,
            )
        ]
    if family == "kv":
        if folder is not None:
            path = KVRetrievalTask.find_data_file(folder, {"num_keys": options.num_keys})
        elif options.num_keys == 75:
            path = KV_RETRIEVAL_75_KEYS
        else:
            raise FileNotFoundError(
                f"the package's sample has 75 keys, not --num_keys {options.num_keys}: pass --data_dir"
            )
        return [
            KVRetrievalTask(path=str(path), num_keys=options.num_keys, gold_positions=options.position_spec, **common)
        ]
    files = release_files(folder, options.num_documents) if folder is not None else {}
    if not files:
        where = f"under --data_dir {folder}" if folder is not None else "in the package's sample (pass --data_dir)"
        raise FileNotFoundError(
            f"no nq-open-{options.num_documents}_total_documents_gold_at_*.jsonl(.gz) {where}; the release's "
            "qa_data/{k}_total_documents folders hold them"
        )
    return [MDQAReleaseTask(path=str(folder), num_documents=options.num_documents, **common)]


def rows_by_position(tasks: list[Task]) -> dict[int, list[dict[str, Any]]]:
    """Every row of `tasks`, with the columns lm-eval's tasks read, by gold position (in the tasks' order)."""
    grouped: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for task in tasks:
        for row in task.rows():
            grouped[row["gold_position"]].append({key: row[key] for key in ROW_KEYS})
    return dict(sorted(grouped.items()))


def _files(task: Task) -> list:
    return task.files() if isinstance(task, MDQAReleaseTask) else [task.path]


def group_name(family: str, options: LitmTasks) -> str:
    size = f"kv{options.num_keys}" if family == "kv" else f"{family}_k{options.num_documents}"
    return f"{options.prefix}_{size}"


def task_yaml(name: str, alias: str, data: Path, family: str, task: Task) -> str:
    """One position's lm-eval task: greedy generation as the project decodes it, scored as the release scores."""
    metric, hook = SCORES[family]
    max_new, stops = task.generation_defaults()
    return "\n".join(
        [
            f"task: {name}",
            f"task_alias: {json.dumps(alias)}",
            "dataset_path: json",
            "dataset_kwargs:",
            "  data_files:",
            f"    test: {json.dumps(str(data))}",
            "test_split: test",
            "output_type: generate_until",
            "doc_to_text: prompt",
            'doc_to_target: "{{answers[0]}}"',
            f"process_results: !function litm_scoring.{hook}",
            "generation_kwargs:",
            f"  until: {json.dumps(list(stops))}",
            f"  max_gen_toks: {max_new}",
            "  do_sample: false",
            "metric_list:",
            f"  - metric: {metric}",
            "    aggregation: mean",
            "    higher_is_better: true",
            "metadata:",
            "  version: 1.0",
            "",
        ]
    )


def group_yaml(name: str, members: list[str], metric: str | None) -> str:
    lines = [f"group: {name}", "task:", *(f"  - {member}" for member in members)]
    if metric is not None:
        lines += [
            "aggregate_metric_list:",
            f"  - metric: {metric}",
            "    aggregation: mean",
            "    weight_by_size: true",
        ]
    return "\n".join([*lines, "metadata:", "  version: 1.0", ""])


def chosen_families(options: LitmTasks) -> dict[str, list[Task]]:
    """Each family to write with its tasks; under 'auto', a family whose file is absent is left out with a note."""
    chosen = {}
    for family in options.family_list:
        try:
            chosen[family] = family_tasks(family, options)
        except FileNotFoundError as err:
            if not options.auto:
                raise
            print(f"note: no {family} tasks: {err}", file=sys.stderr)
    if not chosen:
        raise FileNotFoundError("no task family has its data file; pass --data_dir the folder of the release's files")
    return chosen


def write_family(out: Path, family: str, tasks: list[Task], options: LitmTasks) -> dict[str, Any]:
    """`family`'s data files and task YAMLs, its group YAML; what the manifest records of it."""
    group = group_name(family, options)
    by_position = rows_by_position(tasks)
    width = len(str(max(by_position)))
    names = {}
    for position, rows in by_position.items():
        name = f"{group}_pos{position:0{width}d}"
        data = out / "data" / f"{name}.jsonl"
        data.write_text("".join(json.dumps({**row, "family": family}) + "\n" for row in rows), encoding="utf-8")
        size = rows[0]["num_positions"]
        alias = f"{family} {'keys' if family == 'kv' else 'k'}={size} gold at {position}"
        (out / f"{name}.yaml").write_text(task_yaml(name, alias, data.resolve(), family, tasks[0]), encoding="utf-8")
        names[position] = name
    metric = SCORES[family][0]
    (out / f"{group}.yaml").write_text(group_yaml(group, list(names.values()), metric), encoding="utf-8")
    params = {key: value for key, value in vars(tasks[0]).items() if key != "path"}
    return {
        "group": group,
        "metric": metric,
        "tasks": {str(p): n for p, n in names.items()},
        "files": sorted({str(path) for t in tasks for path in _files(t)}),
        "params": params,
        "questions": len(next(iter(by_position.values()))),
    }


def run(parsed: Namespace, _parser: ConfigParser) -> int:
    options = dataclass_config(parsed, LitmTasks)
    out = check_output_directory(options.out, MANIFEST, "an lm-eval task folder of this command")
    families = chosen_families(options)
    out.mkdir(parents=True, exist_ok=True)
    for old in [*out.glob("*.yaml"), *out.glob("data/*.jsonl")]:  # an earlier output of this command, replaced whole
        old.unlink()
    (out / "data").mkdir(exist_ok=True)
    written = {family: write_family(out, family, tasks, options) for family, tasks in families.items()}
    groups = [entry["group"] for entry in written.values()]
    (out / f"{options.prefix}.yaml").write_text(group_yaml(options.prefix, groups, None), encoding="utf-8")
    shutil.copyfile(SCORING_MODULE, out / "litm_scoring.py")
    write_json_atomic(out / MANIFEST, {"groups": groups, "families": written})
    for family, entry in written.items():
        positions = ", ".join(entry["tasks"])
        print(f"{entry['group']}: {family}, {entry['questions']} questions at gold positions {positions}")
    folder = shlex.quote(str(out))
    print(
        f"\nrun them with lm-eval's engines (one task per gold position; --log_samples for "
        f"`{shlex.quote(sys.executable)} -m evaluation lm-eval report`):\n"
        f"  lm_eval run --include_path {folder} --tasks {options.prefix} --model hf --log_samples "
        f"--output_path OUT --model_args pretrained=MODEL\n"
        f"  {shlex.quote(sys.executable)} -m evaluation lm-eval run --include_path {folder} --tasks {options.prefix} "
        "--model repo-train --log_samples --output_path OUT --model_args pretrained=MODEL,method=pi:scale=1.5"
    )
    return 0
