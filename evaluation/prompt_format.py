"""How a task's prompt reaches an instruction model: as it is, or inside the tokenizer's chat template.

Instruction-tuned models (SmolLM2-Instruct, Llama-3-Instruct, Qwen2-Instruct)
are trained on conversations; a bare task prompt is off their distribution.
`PromptFormat(chat_template=True)` wraps each task prompt as the one user
message of a conversation (after an optional system message) and renders it
with the tokenizer's own template, generation prompt included, as
lm-evaluation-harness's `--apply_chat_template` (and `--system_instruction`)
do. Everything downstream works on the templated text: item spans are moved by
the template's prefix, so prompt lengths, length checks and the item spans
CALIOPE and Found in the Middle use are those of the templated prompt.

The templated text already holds the model's special tokens (BOS, role
markers), so it is tokenised without adding any (`add_special_tokens`), as
lm-eval does for chat-templated requests.

A template that rewrites the message (trims it, say) would move the items
away from their spans: the prompt must appear in the rendered text verbatim,
else the format is refused in one line.
"""

from __future__ import annotations

import hashlib
import signal
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

#: Stands in for the user message while the template is rendered once, to find where the message goes.
_PLACEHOLDER = "\x00repo-train-task-prompt\x00"
#: A chat template is a program (Jinja) shipped with a model: one render may take this long, whatever its loops do.
RENDER_SECONDS = 10.0
#: ... and produce this much text (a template that repeats the prompt a million times is refused, not tokenised).
RENDER_MAX_CHARS = 10_000_000


class _RenderTimeout(Exception):
    """Raised inside a render that ran past RENDER_SECONDS."""


@contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    """Interrupt the block after `seconds` (SIGALRM; on the main thread only, elsewhere unbounded)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame):
        raise _RenderTimeout

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def render_chat(tokenizer, messages: list[dict[str, str]]) -> str:
    """The tokenizer's chat template applied to `messages` with the generation prompt, as text; a template that
    fails (a syntax error, an error it raises itself, e.g. on a system message) or never ends is one line."""
    try:
        with _time_limit(RENDER_SECONDS):
            text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    except _RenderTimeout:
        raise ValueError(
            f"the tokenizer's chat template did not finish rendering one prompt in {RENDER_SECONDS:g} s (a loop that "
            "never ends?); fix the template in tokenizer_config.json or drop --chat_template"
        ) from None
    except Exception as err:  # noqa: BLE001 (a template is the model's code: Jinja raises many kinds)
        roles = "/".join(message["role"] for message in messages)
        raise ValueError(
            f"the tokenizer's chat template fails on a {roles} conversation ({type(err).__name__}: {err}); fix the "
            "template, drop --system_prompt if it refuses a system message, or drop --chat_template"
        ) from None
    if not isinstance(text, str) or len(text) > RENDER_MAX_CHARS:
        raise ValueError(
            f"the tokenizer's chat template rendered {len(text) if isinstance(text, str) else type(text).__name__} "
            f"characters for one prompt (at most {RENDER_MAX_CHARS:,}); fix the template or drop --chat_template"
        )
    return text


def require_chat_template(tokenizer, option: str = "--chat_template") -> None:
    """A tokenizer without a chat template, asked for one by `option`: one line (the same in every command)."""
    if not getattr(tokenizer, "chat_template", None):
        name = getattr(tokenizer, "name_or_path", "")
        raise ValueError(
            f"{option} asks for the tokenizer's chat template, but the tokenizer{f' of {name}' if name else ''}"
            f" has none; drop {option} (or evaluate an instruction model)"
        )


@dataclass(frozen=True)
class PromptFormat:
    """Whether task prompts go through the tokenizer's chat template, and with which system message."""

    chat_template: bool = False
    """Wrap each prompt as the user message of the tokenizer's chat template (with the generation prompt)."""
    system_prompt: str | None = None
    """A system message before the user message; None = none (or the template's own default, if it has one)."""

    def __post_init__(self) -> None:
        if self.system_prompt is not None and not self.chat_template:
            raise ValueError("a system prompt needs the chat template: pass --chat_template true with --system_prompt")

    @property
    def add_special_tokens(self) -> bool:
        """Whether the tokenizer adds its special tokens (a rendered template carries its own)."""
        return not self.chat_template

    def messages(self, content: str) -> list[dict[str, str]]:
        system = [] if self.system_prompt is None else [{"role": "system", "content": self.system_prompt}]
        return [*system, {"role": "user", "content": content}]

    def wrapper(self, tokenizer) -> tuple[str, str]:
        """(text before, text after) the user message in the rendered template; ('', '') without the template."""
        if not self.chat_template:
            return "", ""
        require_chat_template(tokenizer)
        text = render_chat(tokenizer, self.messages(_PLACEHOLDER))
        if text.count(_PLACEHOLDER) != 1:
            raise ValueError("the tokenizer's chat template does not place the user message verbatim once")
        before, after = text.split(_PLACEHOLDER)
        return before, after

    def apply(self, tokenizer, prompts: Sequence[str], spans: Sequence[Sequence[Sequence[int]]]):
        """(texts, item spans) of `prompts` in this format; spans shift by the template's prefix."""
        prompts = list(prompts)
        before, after = self.wrapper(tokenizer)
        if not prompts or (not before and not after):
            return prompts, [[list(span) for span in row] for row in spans]
        texts = [before + prompt + after for prompt in prompts]
        for index, (prompt, text) in enumerate(zip(prompts, texts, strict=True)):  # a template may vary by prompt
            if render_chat(tokenizer, self.messages(prompt)) != text:
                raise ValueError(
                    f"the tokenizer's chat template changes the text of prompt {index + 1} of {len(prompts)} (it is "
                    "not placed verbatim), so item spans cannot be placed; drop --chat_template"
                )
        shift = len(before)
        return texts, [[[s + shift, e + shift] for s, e in row] for row in spans]

    def describe(self, tokenizer) -> dict[str, Any]:
        """What run.json and the search's fitness context record: the option, the system message, the template."""
        record: dict[str, Any] = {"chat_template": self.chat_template, "system_prompt": self.system_prompt}
        if self.chat_template:
            self.wrapper(tokenizer)  # a tokenizer without a template, or a template that fails, is one line first
            record["template_sha256"] = hashlib.sha256(tokenizer.chat_template.encode()).hexdigest()[:16]
        return record


def chat_template_notice(tokenizer, prompt_format: PromptFormat) -> str | None:
    """One line for a run that leaves an instruction model's chat template unused; None otherwise."""
    if prompt_format.chat_template or not getattr(tokenizer, "chat_template", None):
        return None
    return (
        "note: this model's tokenizer has a chat template, and the prompts are given without it; pass "
        "--chat_template true to evaluate it as lm-eval's --apply_chat_template does"
    )
