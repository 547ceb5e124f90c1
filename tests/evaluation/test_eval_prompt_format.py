"""The chat-template option: templated text, item spans moved with it, tokenised without extra specials, recorded."""

import json
import re

import pytest

from evaluation import prompt_format
from evaluation.generation import DecodeSettings
from evaluation.model_loading import tiny_default
from evaluation.prompt_format import PromptFormat, chat_template_notice
from evaluation.runner import RunConfig, prepare_task, run

#: A ChatML-like template (as SmolLM2's), with a default system message when none is given.
CHATML = (
    "{% if messages[0]['role'] != 'system' %}<|im_start|>system\nBe brief.<|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
MDQA = {"num_documents": 3, "num_examples": 2, "gold_positions": [0, 2]}


@pytest.fixture
def chat_model():
    model, tokenizer = tiny_default()
    tokenizer.chat_template = CHATML
    return model, tokenizer


def test_templated_text_keeps_each_item_at_its_span(chat_model):
    _, tokenizer = chat_model
    prompt = "Intro\nitem one\nitem two\nQuestion?"
    spans = [[[6, 14], [15, 23]]]
    texts, moved = PromptFormat(chat_template=True).apply(tokenizer, [prompt], spans)
    assert texts[0].startswith("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n" + prompt)
    assert texts[0].endswith("<|im_end|>\n<|im_start|>assistant\n")
    assert [texts[0][s:e] for s, e in moved[0]] == ["item one", "item two"]
    with_system, _ = PromptFormat(chat_template=True, system_prompt="Answer.").apply(tokenizer, [prompt], spans)
    assert with_system[0].startswith("<|im_start|>system\nAnswer.<|im_end|>\n<|im_start|>user\n")
    assert "Be brief." not in with_system[0]


def test_plain_format_changes_nothing(chat_model):
    _, tokenizer = chat_model
    texts, spans = PromptFormat().apply(tokenizer, ["abc"], [[[0, 1]]])
    assert texts == ["abc"] and spans == [[[0, 1]]]


def test_prepared_task_spans_and_lengths_are_those_of_the_templated_prompt(chat_model):
    model, tokenizer = chat_model
    settings = DecodeSettings(max_new_tokens=4, batch_size=2, max_length=4096)  # bytes: long prompts
    plain = prepare_task("mdqa", MDQA, model, tokenizer, settings)
    chat = prepare_task("mdqa", MDQA, model, tokenizer, settings, PromptFormat(chat_template=True))
    wrapper = len(tokenizer(chat.texts[0].split("Write a high-quality")[0], add_special_tokens=False)["input_ids"])
    for before, after, text in zip(plain.prompts, chat.prompts, chat.texts):
        assert len(after.input_ids) > len(before.input_ids)
        assert list(after.input_ids) == tokenizer(text, add_special_tokens=False)["input_ids"]
        # the byte tokenizer: one token a byte, so every span moves by the template's prefix
        assert [(s - wrapper, e - wrapper) for s, e in after.item_spans] == list(before.item_spans)
        document = tokenizer.decode(after.input_ids[after.item_spans[0][0] : after.item_spans[0][1]])
        assert document.startswith("Document [1](Title: ")


def test_system_prompt_without_the_template_is_refused():
    with pytest.raises(ValueError, match="system prompt needs the chat template"):
        PromptFormat(chat_template=False, system_prompt="x")


def test_a_tokenizer_without_a_template_is_refused_in_one_line():
    model, tokenizer = tiny_default()
    with pytest.raises(ValueError, match="has none; drop --chat_template") as err:
        prepare_task("mdqa", MDQA, model, tokenizer, DecodeSettings(), PromptFormat(chat_template=True))
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("template", "system", "message"),
    [
        ("{% for m in messages %}{{ m['content'] }", None, "fails on a user conversation (TemplateSyntaxError"),
        (
            (
                "{% for m in messages %}{% if m['role'] == 'system' %}{{ raise_exception('no system role') }}"
                "{% endif %}{{ m['content'] }}{% endfor %}"
            ),
            "Be brief.",
            (
                "fails on a system/user conversation (TemplateError: no system role); fix the template, drop "
                "--system_prompt"
            ),
        ),
        ("{{ messages[0]['content'] * 20000000 }}", None, "rendered"),
        ("{{ undefined_function() }}", None, "fails on a user conversation"),
    ],
)
def test_a_template_that_fails_is_refused_in_one_line(chat_model, template, system, message):
    _, tokenizer = chat_model
    tokenizer.chat_template = template
    with pytest.raises(ValueError, match=re.escape(message)) as err:
        PromptFormat(chat_template=True, system_prompt=system).apply(tokenizer, ["a prompt"], [[[0, 1]]])
    assert "\n" not in str(err.value)


def test_a_template_that_never_ends_is_stopped(chat_model, monkeypatch):
    _, tokenizer = chat_model
    monkeypatch.setattr(prompt_format, "RENDER_SECONDS", 0.5)
    # Nested loops within transformers' sandbox limits on each range: the total work is what never ends.
    tokenizer.chat_template = (
        "{% for a in range(100000) %}{% for b in range(100000) %}{% for c in range(100000) %}"
        "{% endfor %}{% endfor %}{% endfor %}{{ messages[0]['content'] }}"
    )
    with pytest.raises(ValueError, match="did not finish rendering one prompt in 0.5 s"):
        PromptFormat(chat_template=True).apply(tokenizer, ["a prompt"], [[[0, 1]]])


def test_a_template_that_rewrites_the_message_is_refused(chat_model):
    _, tokenizer = chat_model
    tokenizer.chat_template = CHATML.replace("{{ m['content'] }}", "{{ m['content'] | trim }}")
    with pytest.raises(ValueError, match="changes the text of prompt 1 of 1"):
        PromptFormat(chat_template=True).apply(tokenizer, ["  padded  "], [[[2, 8]]])


def test_a_template_that_cuts_long_messages_is_checked_on_every_prompt(chat_model):
    """A template whose output depends on the message (it cuts long ones) is caught on the prompt it changes,
    not only when the first prompt happens to be the long one."""
    _, tokenizer = chat_model
    tokenizer.chat_template = CHATML.replace("{{ m['content'] }}", "{{ m['content'][:2000] }}")
    texts, _ = PromptFormat(chat_template=True).apply(tokenizer, ["short", "also short"], [[[0, 1]], [[0, 1]]])
    assert "also short" in texts[1]
    with pytest.raises(ValueError, match="changes the text of prompt 2 of 3"):
        PromptFormat(chat_template=True).apply(tokenizer, ["short", "x" * 2500, "short"], [[[0, 1]]] * 3)


def test_notice_only_for_a_templated_tokenizer_without_the_option(chat_model):
    _, tokenizer = chat_model
    assert "--chat_template true" in chat_template_notice(tokenizer, PromptFormat())
    assert chat_template_notice(tokenizer, PromptFormat(chat_template=True)) is None
    assert chat_template_notice(tiny_default()[1], PromptFormat()) is None


@pytest.mark.slow  # two harness runs (~4 s): the fast suite stays under 5 min
def test_run_records_the_format_and_refuses_to_mix_formats(chat_model, tmp_path, capsys):
    model, tokenizer = chat_model
    config = RunConfig(out=str(tmp_path), tasks={"mdqa": MDQA}, max_new_tokens=2, max_length=4096, chat_template=True)
    run(config, model, tokenizer, progress="off")
    recorded = json.loads((tmp_path / "run.json").read_text())["decode"]["prompt_format"]
    assert recorded["chat_template"] is True and recorded["system_prompt"] is None
    assert len(recorded["template_sha256"]) == 16
    assert "chat template" not in capsys.readouterr().err  # no notice: the option is on
    with pytest.raises(ValueError, match="differs in decode"):
        run(
            RunConfig(out=str(tmp_path), tasks={"mdqa": MDQA}, max_new_tokens=2, max_length=4096),
            model,
            tokenizer,
            progress="off",
        )
    plain = tmp_path / "plain"
    run(
        RunConfig(out=str(plain), tasks={"mdqa": MDQA}, max_new_tokens=2, max_length=4096),
        model,
        tokenizer,
        progress="off",
    )
    assert "--chat_template true" in capsys.readouterr().err


def test_a_run_from_before_the_option_still_resumes(tmp_path):
    model, tokenizer = tiny_default()
    config = RunConfig(out=str(tmp_path), tasks={"mdqa": MDQA}, max_new_tokens=2, max_length=4096)
    run(config, model, tokenizer, progress="off")
    manifest = json.loads((tmp_path / "run.json").read_text())
    del manifest["decode"]["prompt_format"]  # as an earlier version wrote it
    (tmp_path / "run.json").write_text(json.dumps(manifest))
    run(config, model, tokenizer, progress="off")  # accepted: no format recorded = prompts as they are


def test_search_config_checks_the_format():
    from search.config import ConfigError, SearchConfig, TaskConfig

    with pytest.raises(ConfigError, match="needs task.chat_template"):
        SearchConfig(task=TaskConfig(system_prompt="x"))
    assert SearchConfig(task=TaskConfig(chat_template=True, system_prompt="x")).task.prompt_format.chat_template


def test_the_cli_takes_the_options(tmp_path):
    from evaluation.config import add_run_options, resolve
    from repo_common.config_cli import ConfigParser

    parser = ConfigParser.for_command("python -m evaluation run", "")
    add_run_options(parser)
    argv = ["--out", str(tmp_path), "--chat_template", "true", "--system_prompt", "Hi"]
    resolved = resolve(parser.parse(argv)[0])
    assert resolved.run.prompt_format == PromptFormat(chat_template=True, system_prompt="Hi")
    assert resolved.config["chat_template"] is True and resolved.config["system_prompt"] == "Hi"
    with pytest.raises(ValueError, match="system prompt needs the chat template"):
        resolve(parser.parse(["--out", str(tmp_path), "--system_prompt", "Hi"])[0])
