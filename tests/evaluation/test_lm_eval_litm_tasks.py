"""`python -m evaluation lm-eval tasks`: Lost in the Middle as lm-eval tasks, one per gold position.

The prompts lm-eval builds from the written tasks are the harness's token for token (without and with the chat
template, through lm-eval's own `hf` model's tokenisation); the copied scoring module equals the project's
release scores; the files load in lm-eval's task manager as a group of per-position tasks.
"""

from __future__ import annotations

import json
import sys

import pytest

from evaluation.cli import main as evaluation_main
from evaluation.tasks.kv_retrieval import KVRetrievalTask
from evaluation.tasks.mdqa import MDQATask

CHATML = (
    "{% if messages[0]['role'] != 'system' %}<|im_start|>system\nBe brief.<|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
OPTIONS = ["--num_documents", "4", "--num_keys", "75", "--gold_positions", "0,3", "--num_examples", "2"]


@pytest.fixture(scope="module")
def task_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("litm") / "tasks"
    assert evaluation_main(["lm-eval", "tasks", "--out", str(out), *OPTIONS]) == 0
    return out


def test_the_folder_holds_a_task_per_position_a_group_per_family_and_the_scores(task_dir):
    names = sorted(path.name for path in task_dir.glob("*.yaml"))
    assert names == [
        "litm.yaml",
        "litm_kv75.yaml",
        "litm_kv75_pos0.yaml",
        "litm_kv75_pos3.yaml",
        "litm_mdqa_k4.yaml",
        "litm_mdqa_k4_pos0.yaml",
        "litm_mdqa_k4_pos3.yaml",
    ]
    manifest = json.loads((task_dir / "litm_tasks.json").read_text())
    assert manifest["groups"] == ["litm_mdqa_k4", "litm_kv75"]
    assert manifest["families"]["kv"]["metric"] == "kv_containment"
    rows = [json.loads(line) for line in (task_dir / "data" / "litm_mdqa_k4_pos3.jsonl").read_text().splitlines()]
    ours = [row for row in MDQATask(num_documents=4, gold_positions=[0, 3], num_examples=2).rows()]
    assert [r["prompt"] for r in rows] == [r["prompt"] for r in ours if r["gold_position"] == 3]
    assert (task_dir / "litm_scoring.py").is_file()


def test_a_second_write_replaces_its_own_output_and_a_foreign_folder_is_refused(task_dir, tmp_path, capsys):
    assert evaluation_main(["lm-eval", "tasks", "--out", str(task_dir), *OPTIONS[:4], "--families", "mdqa"]) == 0
    assert not (task_dir / "litm_kv75.yaml").exists()
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    assert evaluation_main(["lm-eval", "tasks", "--out", str(foreign)]) == 2
    assert "non-empty directory" in capsys.readouterr().err
    assert evaluation_main(["lm-eval", "tasks", "--out", str(tmp_path / "x"), "--families", "mdqa_release"]) == 2
    err = capsys.readouterr().err
    assert "nq-open-20_total_documents_gold_at_" in err and "Traceback" not in err
    # restore the module's folder for the tests after this one
    assert evaluation_main(["lm-eval", "tasks", "--out", str(task_dir), *OPTIONS]) == 0


def test_bad_options_are_one_line(tmp_path, capsys):
    for bad in (["--families", "mdqa,nope"], ["--prefix", "Bad-Name"], ["--num_documents", "0"]):
        assert evaluation_main(["lm-eval", "tasks", "--out", str(tmp_path / "o"), *bad]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "Traceback" not in err, err


@pytest.mark.parametrize(
    "prediction, answers",
    [
        ("The Eiffel-Tower, in Paris.", ["eiffel tower", "Eiffeltower"]),
        ("a² is the answer", ["a²"]),
        ("THE", ["The"]),
        ("Nobody knows", ["Wilhelm Röntgen"]),
        ("wilhelm conrad röntgen", ["Wilhelm Röntgen", "Röntgen"]),
        ("an\u200dapple", ["apple"]),
    ],
)
def test_the_copied_scores_equal_the_release_scores_of_the_harness(task_dir, prediction, answers):
    sys.path.insert(0, str(task_dir))
    try:
        import litm_scoring
    finally:
        sys.path.remove(str(task_dir))
    from evaluation.metrics import best_subspan_em, kv_containment

    doc = {"answers": answers}
    assert litm_scoring.process_mdqa(doc, [prediction]) == {"best_subspan_em": best_subspan_em(prediction, answers)}
    assert litm_scoring.process_kv(doc, [prediction]) == {"kv_containment": kv_containment(prediction, answers)}


def _leaves(tasks: dict):
    for name, task in tasks.items():
        if isinstance(task, dict):
            yield from _leaves(task)
        else:
            yield name, task


@pytest.mark.usefixtures("lm_eval_installed", "one_thread")
def test_lm_evals_prompts_equal_the_harness_token_for_token(task_dir):
    """Both ways a prompt reaches a model (bare, and in the chat template as `--apply_chat_template` puts it)."""
    import torch
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager, get_task_dict
    from transformers import LlamaConfig, LlamaForCausalLM

    from evaluation.generation import tokenize_prompts
    from evaluation.prompt_format import PromptFormat
    from evaluation.sample_data import KV_RETRIEVAL_75_KEYS
    from repo_train.byte_tokenizer import byte_tokenizer

    tokenizer = byte_tokenizer()
    tokenizer.chat_template = CHATML
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        max_position_embeddings=8192,
    )
    torch.manual_seed(0)
    lm = HFLM(pretrained=LlamaForCausalLM(config), tokenizer=tokenizer, device="cpu", batch_size=1)
    tasks = dict(_leaves(get_task_dict(["litm"], TaskManager(include_path=str(task_dir)))))
    built = [
        MDQATask(num_documents=4, gold_positions=[0, 3], num_examples=2),
        KVRetrievalTask(num_keys=75, gold_positions=[0, 3], num_examples=2, path=str(KV_RETRIEVAL_75_KEYS)),
    ]
    rows = {row["id"]: row for task in built for row in task.rows()}
    checked = 0
    for chat in (False, True):
        prompt_format = PromptFormat(chat_template=chat)
        for name, task in tasks.items():
            task.build_all_requests(
                limit=None,
                rank=0,
                world_size=1,
                apply_chat_template=chat,
                chat_template=lm.apply_chat_template,
                tokenizer_name="byte",
            )
            for instance in task.instances:
                row = rows[instance.doc["id"]]
                texts, spans = prompt_format.apply(tokenizer, [row["prompt"]], [row["item_spans"]])
                (ours,) = tokenize_prompts(tokenizer, texts, spans, add_special_tokens=prompt_format.add_special_tokens)
                ids, mask = lm.tok_batch_encode([instance.args[0]])
                assert ids[0][mask[0].bool()].tolist() == list(ours.input_ids), (name, chat)
                assert instance.args[1]["until"] == ["\n"] and instance.args[1]["max_gen_toks"] == 100
                checked += 1
    assert checked == 16  # bare and templated x 2 families x 2 positions x 2 questions
