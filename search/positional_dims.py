"""`python -m search positional-dims`: PositionalHidden's prior-based search of a model's positional channels.

The options and what the search does: search/positional_dims_options.py. The statistic:
search/positional_statistic.py; how a candidate is applied while it is scored: search/channel_scaling.py.

Resumable: NAME.state.json (next to the config NAME.json) records what is done after every validation example
and, with NAME.hidden.npz (the running sum of the hidden states and the number of texts in it), the hidden-state
averaging at most every `SAVE_SECONDS` and whenever the search stops. Ctrl-C finishes the text or example at hand,
saves, and exits 130 in one line; `--resume` goes on from there, and the result equals an uninterrupted search's
(the sums are float64, added in the same order).
"""

from __future__ import annotations

import json
import random
import signal
import string
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from evaluation.model_loading import load_model, weights_identity
from repo_common.atomic import atomic_path, write_json_atomic
from repo_common.progress import Progress
from repo_common.run_lock import run_lock
from search.channel_scaling import attention_modules, scaled_channels
from search.positional_dims_options import (
    PROG,
    SEARCH_KEY,
    STATE_KIND,
    PositionalDims,
    check_outputs,
    load_valid_set,
)
from search.positional_statistic import candidate_channels

#: The authors' code this search follows, pinned.
AUTHORS = "github.com/PositionalHidden/PositionalHidden@f3bcd5560c2b080233e9f12ae60b8c42880faf97"
EXIT_INTERRUPTED = 130
SAVE_SECONDS = 60.0
#: Characters of the random corpus (the authors' random_string.txt is not published in their repository).
RANDOM_CHARACTERS = string.ascii_letters + string.digits + string.punctuation + " "


class SearchInterrupted(Exception):
    """Ctrl-C: the state is saved; `--resume` continues."""


class StopRequest:
    """While active, the first SIGINT only asks the search to stop at the next safe point (a second one stops
    at once, as usual)."""

    def __init__(self) -> None:
        self.requested = False
        self._previous = None

    def _handle(self, _signum, _frame) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

    def __enter__(self) -> StopRequest:  # noqa: PYI034 (typing.Self needs Python 3.11)
        self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        signal.signal(signal.SIGINT, self._previous)


@dataclass
class SearchState:
    """What is done: the statistic's candidates (once the averaging is complete) and each scored example's loss
    per candidate ("baseline" = unscaled)."""

    options: dict
    model: dict
    candidates: list[dict] | None = None
    entries: int | None = None
    losses: dict[str, list[float]] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"kind": STATE_KIND, "format": 1, **self.__dict__}

    def save(self, path: Path) -> None:
        write_json_atomic(path, self.to_dict())

    @classmethod
    def load(cls, path: Path) -> SearchState:
        data = json.loads(path.read_text(encoding="utf-8"))
        return cls(**{key: data[key] for key in ("options", "model", "candidates", "entries", "losses")})


def _resumable_state(path: Path, options: dict, model: dict) -> SearchState:
    """The state at `path` when it exists (it must be of the same options and weights), else a new one."""
    if not path.exists():
        return SearchState(options, model)
    state = SearchState.load(path)
    changed = sorted(key for key in options if state.options.get(key) != options[key])
    if changed:
        raise ValueError(f"{path} was searched with other options ({', '.join(changed)}): give the same ones to resume")
    if state.model != model:
        raise ValueError(f"{path} was searched on other weights: resume with the same --model, or pass another --out")
    return state


def corpus_text(config: PositionalDims) -> str:
    """The text samples are cut from: `--corpus`, or seeded random characters (enough for every sample)."""
    if config.corpus is not None:
        return Path(config.corpus).read_text(encoding="utf-8", errors="replace")
    generator = random.Random(config.seed)
    return "".join(generator.choices(RANDOM_CHARACTERS, k=config.samples * config.max_length * 10))


def sample_ids(tokenizer, corpus: str, index: int, config: PositionalDims) -> list[int]:
    """Text `index`: the corpus's `index`-th slice of 10 x max_length characters, its first max_length tokens."""
    width = config.max_length * 10
    ids = tokenizer.encode(corpus[index * width : (index + 1) * width], add_special_tokens=False)
    if config.add_bos_token:
        if tokenizer.bos_token_id is None:
            raise ValueError("--add_bos_token: the model's tokenizer has no BOS token; leave the option out")
        ids = [tokenizer.bos_token_id, *ids]
    if len(ids) < config.max_length:
        raise ValueError(
            f"text {index} of the corpus has {len(ids)} tokens, fewer than --max_length {config.max_length}: "
            f"give a corpus of at least {config.samples * width} characters, fewer --samples or a lower --max_length"
        )
    return ids[: config.max_length]


def _save_hidden(path: Path, total: np.ndarray, count: int) -> None:
    with atomic_path(path, suffix=".npz") as tmp:
        np.savez(tmp, total=total, count=np.array(count))


def averaged_hidden(model, tokenizer, config: PositionalDims, path: Path, stop: StopRequest) -> np.ndarray:
    """The hidden states of every layer averaged over the texts, (entries, positions, channels); continues the sum
    saved at `path`, saves it as it goes and raises `SearchInterrupted` (after saving) when asked to stop."""
    total, count = None, 0
    if path.exists():
        with np.load(path) as saved:
            total, count = saved["total"], int(saved["count"])
    corpus = corpus_text(config)
    last_save = time.monotonic()
    with Progress(config.samples, "hidden states", unit="text", initial=count, mode=not config.no_progress) as bar:
        while count < config.samples:
            if stop.requested:
                if total is not None:
                    _save_hidden(path, total, count)
                raise SearchInterrupted
            ids = torch.tensor([sample_ids(tokenizer, corpus, count, config)], device=model.device)
            with torch.no_grad():
                states = model(input_ids=ids, output_hidden_states=True, use_cache=False).hidden_states
            layers = torch.stack(states, dim=0)[:, 0].double().cpu().numpy()
            total = layers if total is None else total + layers
            count += 1
            bar.update()
            if time.monotonic() - last_save >= SAVE_SECONDS or count == config.samples:
                _save_hidden(path, total, count)
                last_save = time.monotonic()
    return total / count


def prompt_text(tokenizer, text: str) -> str:
    """The prompt as the authors' validation sends it: the user turn of the chat template with the assistant's
    turn opened; a tokenizer without a chat template (a base model) gets the text as it is."""
    if getattr(tokenizer, "chat_template", None) is None:
        return text
    messages = [{"role": "user", "content": text}]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def answer_loss(model, tokenizer, example: dict, recompute_rows: Callable[[int], None]) -> float:
    """Mean cross-entropy of the answer's tokens after the prompt (teacher-forced), as the authors' validation:
    the answer's rows and the prompt's last row are the recomputed ones (`recompute_rows`)."""
    prompt = tokenizer.encode(prompt_text(tokenizer, example["input"]), add_special_tokens=False)
    answer = tokenizer.encode(example["output"], add_special_tokens=False)
    if not answer:
        raise ValueError(f"a validation example's output {example['output']!r} has no tokens; give a non-empty one")
    recompute_rows(len(answer) + 1)
    ids = torch.tensor([prompt + answer], device=model.device)
    labels = torch.tensor([[-100] * len(prompt) + answer], device=model.device)
    with torch.no_grad():
        return float(model(input_ids=ids, labels=labels, use_cache=False).loss)


def score_candidates(model, tokenizer, config: PositionalDims, state: SearchState, paths: dict, stop: StopRequest):
    """Each example's answer loss unscaled ("baseline") and with each candidate scaled alone, into
    `state.losses`; the state is saved after every example, and a stop request raises `SearchInterrupted`."""
    examples = load_valid_set(config.valid_set, config.valid_limit)
    keys = ["baseline", *(str(item["dim"]) for item in state.candidates)]
    total = len(keys) * len(examples)
    done = sum(len(state.losses.get(key, [])) for key in keys)
    with Progress(total, "validation", unit="example", initial=done, mode=not config.no_progress) as bar:
        for key in keys:
            losses = state.losses.setdefault(key, [])
            dims = [] if key == "baseline" else [int(key)]
            scaling = {"skip_first": config.skip_first, "change_value": config.change_value}
            with scaled_channels(model, dims, config.layer_list, config.factor, **scaling) as recompute_rows:
                while len(losses) < len(examples):
                    if stop.requested:
                        raise SearchInterrupted
                    losses.append(answer_loss(model, tokenizer, examples[len(losses)], recompute_rows))
                    state.save(paths["state"])
                    bar.update(loss=losses[-1])
    return len(examples)


def config_file(config: PositionalDims, state: SearchState, examples: int) -> dict:
    """The authors' config keys, and the search's statistics and scores under `SEARCH_KEY`."""
    mean = {key: sum(values) / len(values) for key, values in state.losses.items()}
    # the authors rank by the loss rounded to 4 decimals, the baseline first among equals
    ranking = sorted(mean.items(), key=lambda item: round(item[1], 4))
    best = [int(key) for key, _ in ranking if key != "baseline"][: config.num_dims]
    candidates = [
        {**item, "loss": mean[str(item["dim"])], "loss_change": mean[str(item["dim"])] - mean["baseline"]}
        for item in state.candidates
    ]
    return {
        "dims": best,
        "layers": config.layer_list,
        "factor": config.factor,
        "skip_first": config.skip_first,
        "last_recompute_tokens": 1,
        "change_value": config.change_value,
        SEARCH_KEY: {
            "method": f"PositionalHidden's prior-based dimension search ({AUTHORS})",
            "model": str(config.model),
            "baseline_loss": mean["baseline"],
            "candidates": candidates,
            "ranking": [[key, loss] for key, loss in ranking[: config.topk_loss]],
            "beats_baseline": [dim for dim in best if mean[str(dim)] < mean["baseline"]],
            "layers_compared": state.entries,
            "valid_examples": examples,
            "options": state.options,
        },
    }


def search(config: PositionalDims, paths: dict, stop: StopRequest) -> dict:
    """The whole search, from where its state stands; returns the config it writes."""
    state = _resumable_state(paths["state"], config.state_options(), weights_identity(config.model))
    state.save(paths["state"])  # before the first npz: the state file marks every file here as this search's
    model, tokenizer = load_model(config.model, dtype=config.dtype)
    modules = attention_modules(model)
    if config.layer_list[-1] >= len(modules):
        raise ValueError(
            f"--layers {config.layers}: the model has {len(modules)} layers (0..{len(modules) - 1}); pick layers in it"
        )
    if state.candidates is None:
        hidden = averaged_hidden(model, tokenizer, config, paths["hidden"], stop)
        found, state.entries = candidate_channels(hidden, config.topk_smooth, config.mono_skip, config.smooth_skip)
        if len(found) < config.num_dims:
            raise ValueError(
                f"the statistic found {len(found)} candidate channels, fewer than --num_dims {config.num_dims}: "
                "average more --samples, or lower --mono_skip"
            )
        state.candidates = [item.to_dict() for item in found]
        state.save(paths["state"])
        print(f"candidates (smoothest first): {[item.dim for item in found]}", file=sys.stderr, flush=True)
    examples = score_candidates(model, tokenizer, config, state, paths, stop)
    result = config_file(config, state, examples)
    write_json_atomic(paths["config"], result)
    return result


def command(config: PositionalDims) -> int:
    """Run (or resume) the search; 130 after Ctrl-C (its state saved), 0 when the config is written."""
    paths = check_outputs(config)
    try:
        with run_lock(paths["lock"], f"positional-dims output {config.out}"), StopRequest() as stop:
            result = search(config, paths, stop)
    except (SearchInterrupted, KeyboardInterrupt):
        print(
            f"{PROG}: interrupted; what is done is saved in {paths['state']}: rerun the same command with --resume "
            "to go on from there",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    found = result[SEARCH_KEY]
    print(f"dims {result['dims']} (baseline loss {found['baseline_loss']:.4f}); wrote {config.out}")
    return 0
