"""`repo-train`: lm-evaluation-harness's HF model with one of this project's method stacks attached.

`--model repo-train --model_args pretrained=DIR,method=SPEC` (SPEC as in `python -m evaluation run --methods`,
default `baseline`). The model loads as lm-eval's `hf` loads it (this class is its `HFLM`: batching, chat
templates, its multi-process launch), plus REPO checkpoints (`repo_olmo2`, and the published `olmo2` +
`pe_config` layout, which the plain Auto class would load without its REPO weights); then the stack is attached
once, for the model's life.

Why three kinds of method: a method that only installs per-layer position policies (baseline, pi, lpes) changes
what every forward computes, so lm-eval's own forwards and `generate` run it unchanged, in all three request
types. A method that acts per batch (Ms-PoE ranks heads at the prefill, PCD and Attention Buckets process each
step's logits) needs the project's decode loop (`evaluation.methods.decoding`): `generate_until` runs it
(greedy only), and log-likelihoods go through its teacher forcing (`score_continuations`), so a score measures
the distribution the method decodes from (PCD's is refused there, as in `--score gold_loglik`). CALIOPE and
Found in the Middle need the token spans of a prompt's documents, which lm-eval's requests do not carry: refused
before the model loads.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any, get_args, get_type_hints

import torch
from lm_eval.__main__ import setup_logging
from lm_eval._cli import HarnessCLI
from lm_eval._cli.utils import split_top_level
from lm_eval.api.registry import register_model
from lm_eval.models.huggingface import HFLM
from transformers import AutoTokenizer

import repo_train
from evaluation.decode_settings import DecodeSettings
from evaluation.methods.base import Method, MethodStack, parse_method_spec, spec_fields, split_stack_spec
from evaluation.methods.decoding import TokenizedPrompt, collate, generate_batch, score_continuations
from evaluation.prompt_format import require_chat_template
from evaluation.run_config import RunConfig
from repo_common.file_permissions import describe
from repo_common.model_directory import check_model_files
from repo_train.modeling import RePoOlmo2ForCausalLM

#: Methods that place their work by the documents of a prompt, and why lm-eval cannot run them.
NEEDS_DOCUMENT_SPANS = {
    "caliope": "CALIOPE remaps positions by document chunk",
    "fim": "Found in the Middle calibrates attention per document",
}

#: The hooks beyond attach/detach: a method overriding one acts per batch and needs the project's decode loop.
PER_BATCH_HOOKS = ("start", "finish", "prefill_position_ids", "process_logits", "row_groups")


#: Generation keywords the project's greedy loop honours (sampling ones only when they ask for no sampling).
GREEDY_KWARGS = frozenset({"do_sample", "temperature", "top_p", "top_k"})


class MethodRefused(ValueError):
    """A method stack (or a request to it) this model cannot run faithfully; one line saying why."""


class ArgumentRefused(ValueError):
    """An lm-eval argument for `repo-train` that `evaluation run` would refuse as its own option; one line."""


#: lm-eval's options whose values are `key=value` lists, read strictly here (lm-eval keeps the last of a repeated
#: key with a log warning, and keeps spaces around a key as part of its name).
KEY_VALUE_OPTIONS = {"--model_args": "--model_args", "-a": "--model_args", "--gen_kwargs": "--gen_kwargs"}


def _key_value_texts(argv: Sequence[str]) -> list[tuple[str, str]]:
    """(option, text) of every value given to a KEY_VALUE_OPTIONS option (`nargs="+"`; `--opt=value` too)."""
    found, option = [], None
    for token in argv:
        name, equals, value = token.partition("=")
        if token.startswith("-") and equals and name in KEY_VALUE_OPTIONS:
            found.append((KEY_VALUE_OPTIONS[name], value))
            option = KEY_VALUE_OPTIONS[name]
        elif token in KEY_VALUE_OPTIONS:
            option = KEY_VALUE_OPTIONS[token]
        elif token.startswith("-") and len(token) > 1:
            option = None
        elif option is not None:
            found.append((option, token))
    return found


def check_key_values(argv: Sequence[str]) -> None:
    """A key given twice (in one value or across values of the same option) or with spaces around it: refused
    in one line, before lm-eval would keep the last or a key named `' method '`. JSON values are lm-eval's own."""
    seen: dict[tuple[str, str], str] = {}
    for option, text in _key_value_texts(argv):
        if text.lstrip().startswith("{"):
            continue
        for item in split_top_level(text):
            key = item.split("=", 1)[0]
            if key != key.strip():
                raise ArgumentRefused(
                    f"{option}: key {key!r} has spaces around it; write {key.strip()}=VALUE with no spaces"
                )
            if (option, key) in seen:
                raise ArgumentRefused(
                    f"{option}: {key} is given twice ({seen[option, key]!r}, then {item!r}); give it once"
                )
            seen[option, key] = item


def _positive(option: str, value: Any) -> None:
    """`value` (an int or its text; lm-eval's 'auto' forms pass) is at least 1, as `evaluation run` asks."""
    text = str(value).strip()
    if text.lstrip("+-").isdigit() and int(text) < 1:
        raise ArgumentRefused(f"{option} must be at least 1, got {text}")


def check_repo_train_args(args: argparse.Namespace) -> None:
    """`--model repo-train`'s arguments judged as `evaluation run` judges its own options, before lm-eval loads
    anything: the model directory (`pretrained=`, as `--model`), the dtype, batch sizes, `max_gen_toks`, and the
    tokenizer's chat template when `--apply_chat_template` asks for it."""
    if getattr(args, "model", None) != "repo-train":
        return
    model_args = getattr(args, "model_args", None) or {}
    pretrained = model_args.get("pretrained")
    if pretrained is None or not str(pretrained).strip():
        raise ArgumentRefused(
            "--model repo-train needs the model directory: --model_args pretrained=DIR (as `evaluation run --model`)"
        )
    try:
        check_model_files("pretrained=", str(pretrained))
    except PermissionError as err:
        raise ArgumentRefused(describe(err)) from None
    except (FileNotFoundError, ValueError) as err:
        raise ArgumentRefused(str(err)) from None
    dtypes = get_args(get_type_hints(RunConfig)["dtype"])
    if "dtype" in model_args and str(model_args["dtype"]) not in dtypes:
        raise ArgumentRefused(f"--model_args dtype={model_args['dtype']}: choose one of {', '.join(dtypes)}")
    _positive("--batch_size", getattr(args, "batch_size", 1))
    for key in ("batch_size", "max_batch_size", "max_gen_toks", "max_length"):
        if key in model_args:
            _positive(f"--model_args {key}", model_args[key])
    gen_kwargs = getattr(args, "gen_kwargs", None) or {}
    if isinstance(gen_kwargs, dict):
        for key in ("max_gen_toks", "max_new_tokens"):
            if key in gen_kwargs:
                _positive(f"--gen_kwargs {key}", gen_kwargs[key])
    if getattr(args, "apply_chat_template", False):
        tokenizer = AutoTokenizer.from_pretrained(str(pretrained))
        try:
            require_chat_template(tokenizer, "--apply_chat_template")
        except ValueError as err:
            raise ArgumentRefused(str(err)) from None


def acts_per_batch(method: Method) -> bool:
    """True when `method` overrides a per-batch hook (so lm-eval's plain forwards would skip its work)."""
    return any(getattr(type(method), hook) is not getattr(Method, hook) for hook in PER_BATCH_HOOKS)


def checked_stack(spec: str) -> MethodStack:
    """The stack `spec` names, refused in one line when a method needs what lm-eval does not give."""
    try:
        for part in split_stack_spec(spec):  # by name first: its parameters do not matter
            name, _ = parse_method_spec(part)
            if name in NEEDS_DOCUMENT_SPANS:
                raise MethodRefused(
                    f"method {name!r} is not available in lm-eval: {NEEDS_DOCUMENT_SPANS[name]}, and lm-eval's "
                    "requests carry no document spans; run it with `python -m evaluation run`"
                )
        return MethodStack.parse(spec)
    except MethodRefused:
        raise
    except ValueError as err:
        raise MethodRefused(f"method={spec!r}: {err}") from err


def _check_unquoted_parameters(stack: MethodStack, model_args: dict[str, Any]) -> None:
    """lm-eval splits `--model_args` at commas: `method=ms_poe:min_ratio=1.2,max_ratio=1.8` reaches us as
    method `ms_poe:min_ratio=1.2` plus a model argument `max_ratio`. Refused, naming the quoting that works."""
    names = {f.name for method in stack.methods for f in spec_fields(type(method))}
    stray = sorted(names & set(model_args))
    if stray:
        raise MethodRefused(
            f"model argument(s) {stray} are parameters of method {stack.label!r}: lm-eval splits --model_args at "
            'commas, so quote a spec with several parameters: method="ms_poe:min_ratio=1.2,max_ratio=1.8"'
        )


def _is_published_repo(config) -> bool:
    """A published RePo directory: `olmo2` with a `pe_config`, whose REPO weights only our class keeps."""
    return getattr(config, "model_type", None) == "olmo2" and getattr(config, "pe_config", None) is not None


@register_model("repo-train")
class RepoTrainLM(HFLM):
    """lm-eval's `hf` model with a method stack of this project attached (`method=SPEC`, default baseline)."""

    def __init__(self, pretrained: Any, method: str = "baseline", **kwargs: Any) -> None:
        stack = checked_stack(str(method))  # before any weights load: a refusal comes in a second
        _check_unquoted_parameters(stack, kwargs)
        super().__init__(pretrained=pretrained, **kwargs)
        self.method_stack = stack
        self.needs_loop = any(acts_per_batch(m) for m in stack.methods)
        self._attached = stack.attached(self.model, self.tokenizer)
        try:
            self._attached.__enter__()  # for the model's life: lm-eval keeps one model per run
        except ValueError as err:  # the stack does not fit this model (e.g. ms_poe's start_layer past its layers)
            raise MethodRefused(f"method {stack.label!r} on {pretrained}: {err}") from err

    def _get_backend(self, config, backend="default", trust_remote_code=False) -> None:
        super()._get_backend(config, backend=backend, trust_remote_code=trust_remote_code)
        if _is_published_repo(config):
            self.AUTO_MODEL_CLASS = RePoOlmo2ForCausalLM

    def get_model_info(self) -> dict:
        """lm-eval writes this into the results file's `config`: what was run, and by which version."""
        info = super().get_model_info()
        info.update(repo_train_method=self.method_stack.label, repo_train_version=repo_train.__version__)
        return info

    def _model_generate(self, context, max_length: int, stop: list[str], **generation_kwargs) -> torch.Tensor:
        if not self.needs_loop:
            return super()._model_generate(context, max_length, stop, **generation_kwargs)
        mask = generation_kwargs.pop("attention_mask", None)
        sampling = generation_kwargs.get("do_sample") or (generation_kwargs.get("temperature") or 0.0) > 0
        other = sorted(set(generation_kwargs) - GREEDY_KWARGS)
        if sampling or other:
            raise MethodRefused(
                f"method {self.method_stack.label!r} decodes greedily in the project's loop, which takes no "
                f"{other or 'do_sample / temperature'}; drop them from the task's generation_kwargs (or --gen_kwargs)"
            )
        if mask is None:
            mask = torch.ones_like(context)
        prompts = [TokenizedPrompt(row[keep.bool()].tolist()) for row, keep in zip(context, mask)]
        batch = collate(prompts, self.tokenizer.pad_token_id, self.model.device)
        width = context.shape[1]
        settings = DecodeSettings(max_new_tokens=max_length - width, stop_strings=tuple(stop), batch_size=len(prompts))
        outputs = generate_batch(self.model, self.tokenizer, batch, settings, self.method_stack)
        # lm-eval cuts each row after `width` tokens and decodes without special tokens: end-of-text fills the rest
        filled = torch.full((len(outputs), max_length), self.eot_token_id, dtype=torch.long)
        filled[:, :width] = context.cpu()
        for row, output in enumerate(outputs):
            filled[row, width : width + len(output.token_ids)] = torch.tensor(output.token_ids, dtype=torch.long)
        return filled

    def _loglikelihood_tokens(self, requests, disable_tqdm: bool = False, override_bs: int | None = None):
        if not self.needs_loop:
            return super()._loglikelihood_tokens(requests, disable_tqdm=disable_tqdm, override_bs=override_bs)
        for method in self.method_stack.methods:
            problem = method.forced_scoring_problem(self.model)
            if problem is not None:
                raise MethodRefused(f"loglikelihood under method {self.method_stack.label!r}: {problem}")
        size = override_bs or (self.batch_size if isinstance(self.batch_size, int) else 1)
        results: list[tuple[float, bool]] = []
        for first in range(0, len(requests), size):
            chunk = requests[first : first + size]
            scored = self._forced_scores([context for _, context, _ in chunk], [cont for _, _, cont in chunk])
            for (key, _, _), answer in zip(chunk, scored):
                results.append(answer)
                if key is not None:
                    self.cache_hook.add_partial("loglikelihood", key, answer)
        return results

    def _forced_scores(self, contexts: Sequence[list[int]], continuations: Sequence[list[int]]):
        """(Σ log p, greedy?) of each continuation after its context, teacher-forced through the decode loop."""
        for context, continuation in zip(contexts, continuations):
            if len(context) + len(continuation) > self.max_length:
                raise MethodRefused(
                    f"a loglikelihood request of {len(context) + len(continuation)} tokens exceeds max_length="
                    f"{self.max_length}; method {self.method_stack.label!r} scores whole requests only"
                )
        batch = collate([TokenizedPrompt(c) for c in contexts], self.tokenizer.pad_token_id, self.model.device)
        scores = score_continuations(self.model, self.tokenizer, batch, continuations, self.method_stack)
        return [(score.logprob_sum, score.greedy_match) for score in scores]


def run_cli(argv: Sequence[str]) -> int:
    """lm-eval's own command line on `argv`, unchanged, with `repo-train` registered; a refusal is one line, exit 2."""
    setup_logging()
    saved = sys.argv
    sys.argv = ["lm-eval", *argv]  # lm-eval's parser reads sys.argv itself
    try:
        check_key_values(argv)
        parser = HarnessCLI()
        args = parser.parse_args()
        check_repo_train_args(args)
        parser.execute(args)
    except (MethodRefused, ArgumentRefused) as refusal:
        print(f"python -m evaluation lm-eval: error: {refusal}", file=sys.stderr)
        return 2
    finally:
        sys.argv = saved
    return 0
