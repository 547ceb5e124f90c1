"""Options of `python -m search positional-dims`, and the checks of its files; plain Python (no torch), so `--help`
and every refusal that needs no model answer at once. The work: search/positional_dims.py.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, fields
from pathlib import Path

from jsonargparse.typing import NonNegativeInt, PositiveInt

from repo_common.config_cli import ConfigParser, add_dataclass_options
from repo_common.output_guard import check_output_file, check_parents, require_path

PROG = "python -m search positional-dims"
DESCRIPTION = """\
PositionalHidden's search of a model's positional hidden-state channels, following the authors' prior-based
search (Yu et al., "Mitigate Position Bias in Large Language Models via Scaling a Single Dimension", ACL Findings
2025; github.com/PositionalHidden/PositionalHidden, experiments/search_dimension/, commit
f3bcd5560c2b080233e9f12ae60b8c42880faf97):

1. the hidden states of every layer, averaged over `--samples` texts of `--max_length` tokens each (a corpus of
   random characters unless `--corpus` names a text file);
2. the prior: a channel is a candidate when its averaged curve over positions, fitted by a cubic, is monotone in
   more than a quarter of the layers; the `--topk_smooth` smoothest such channels are kept;
3. each candidate is scaled alone by `--factor` in `--layers` and scored by the gold answer's loss on a
   validation set (`--valid_set`, the authors' JSON-lines format: one {"input", "output"} object per line); the
   lowest losses win.

It writes `--out` in the authors' config format (`dims`, `layers`, `factor`, `skip_first`,
`last_recompute_tokens`, `change_value`), what `positional_hidden:config=FILE.json` reads, with the statistics and
every candidate's loss under the extra key `search`.
"""

#: The search's own key in the written config, next to the authors' keys (the method ignores it).
SEARCH_KEY = "search"
#: What the state file says it is (a file without it at the state's path is not this command's).
STATE_KIND = "positional-dims state"
#: The authors' validation rule scores candidates in layers 10..25 (eval_on_valid_set.py).
AUTHORS_LAYERS = "10-25"
DTYPES = ("float32", "bfloat16", "float16")
_RANGE = re.compile(r"(\d+)(?:-(\d+))?")


@dataclass
class PositionalDims:
    """The search's options (each also a key of a `--config` file), judged when built."""

    model: str
    """the model: a local Hugging Face directory (a RoPE causal LM)"""
    valid_set: str
    """validation set, the authors' format: JSON lines, each {"input": PROMPT, "output": ANSWER}"""
    out: str
    """the config file to write (JSON); its state (NAME.state.json, NAME.hidden.npz) is kept beside it"""
    valid_limit: PositiveInt | None = None
    """score only the first N validation examples (default: all)"""
    corpus: str | None = None
    """text file the hidden-state samples are cut from (default: seeded random characters, as the authors'
    random_string corpus)"""
    seed: int = 0
    """seed of the random-character corpus"""
    samples: PositiveInt = 200
    """texts whose hidden states are averaged (the authors' sample_num)"""
    max_length: PositiveInt = 1000
    """tokens per text (the authors' max_length); each text is cut from 10 x max_length characters"""
    mono_skip: NonNegativeInt = 300
    """first positions left out of the monotonicity fit (the authors' 300)"""
    smooth_skip: NonNegativeInt = 200
    """first positions left out of the smoothness (the authors' 200)"""
    topk_smooth: PositiveInt = 10
    """candidates kept by the statistic, smoothest first (the authors' topk_of_smooth)"""
    topk_loss: PositiveInt = 3
    """entries of the ranking by validation loss, the unscaled baseline among them (the authors' topk_of_loss)"""
    num_dims: PositiveInt = 1
    """how many of the best-scoring channels the config's `dims` lists (the authors' configs list one)"""
    layers: str = AUTHORS_LAYERS
    """layers whose attention input is scaled, comma-separated indices or ranges A-B (0-based, inclusive)"""
    factor: float = 0.0
    """the factor the candidate channel is multiplied by (the authors' validation uses 0)"""
    skip_first: NonNegativeInt = 0
    """first tokens left unscaled"""
    change_value: bool = False
    """scale the value path too (the authors' default: only queries and keys)"""
    add_bos_token: bool = False
    """start each hidden-state text with the tokenizer's BOS token (the authors' default: no)"""
    dtype: str = "float32"
    """model precision: float32, bfloat16 or float16"""
    resume: bool = False
    """continue the search whose state is beside --out (an interrupted one goes on where it stopped)"""
    no_progress: bool = False
    """plain progress lines instead of a bar"""

    def __post_init__(self) -> None:
        """The values judged, the input files present (a ValueError is the one-line refusal)."""
        for option in ("model", "valid_set"):
            require_path(getattr(self, option), f"--{option}")
        require_path(self.out, "--out")
        if not Path(self.model).is_dir():
            raise ValueError(f"--model {self.model}: no such directory; pass a local Hugging Face model directory")
        if not Path(self.valid_set).is_file():
            raise ValueError(f"--valid_set {self.valid_set}: no such file; pass a JSON-lines file of input/output")
        load_valid_set(self.valid_set, self.valid_limit)  # a malformed line is refused before the model loads
        if self.corpus is not None and not Path(self.corpus).is_file():
            raise ValueError(f"--corpus {self.corpus}: no such file; pass a text file, or leave it out")
        if not self.out.endswith(".json"):
            raise ValueError(f"--out {self.out}: the config is a JSON file; give a name ending in .json")
        if self.dtype not in DTYPES:
            raise ValueError(f"--dtype {self.dtype!r}: choose one of {', '.join(DTYPES)}")
        self.layer_list = parse_layers(self.layers)
        for option in ("mono_skip", "smooth_skip"):
            left = self.max_length - getattr(self, option)
            if left < 12:  # a cubic fit and the smoothing window of 10 need more points than that
                raise ValueError(
                    f"--{option} {getattr(self, option)} leaves {left} of --max_length {self.max_length} positions; "
                    "the statistic needs at least 12: lower it or raise --max_length"
                )
        if self.num_dims > self.topk_smooth:
            raise ValueError(f"--num_dims {self.num_dims} exceeds the {self.topk_smooth} candidates (--topk_smooth)")

    def state_options(self) -> dict:
        """The options a resumed search must share with the one it continues (what its results depend on)."""
        free = {"out", "resume", "no_progress"}
        return {item.name: getattr(self, item.name) for item in fields(self) if item.name not in free}


def output_paths(out: str | Path) -> dict[str, Path]:
    """The files of one search, from the config path NAME.json."""
    out = Path(out)
    stem = out.with_suffix("")
    return {
        "config": out,
        "state": stem.with_name(stem.name + ".state.json"),
        "hidden": stem.with_name(stem.name + ".hidden.npz"),
        "lock": stem.with_name(stem.name + ".lock"),
    }


def _is_state(path: Path) -> bool:
    try:
        return json.loads(path.read_text(encoding="utf-8")).get("kind") == STATE_KIND
    except (OSError, ValueError, AttributeError):
        return False


def check_outputs(config: PositionalDims) -> dict[str, Path]:
    """The search's files, refused unless missing or this search's own: with `--resume` an earlier state of this
    command makes them its own; without it, any of them present is refused. Reads only."""
    paths = output_paths(config.out)
    check_parents(paths["config"], fix="pass an --out inside a directory (e.g. configs/positional_hidden/NAME.json)")
    state = paths["state"]
    if state.exists() and not _is_state(state):
        raise ValueError(f"{state} is not a positional-dims state: nothing was written; pass another --out")
    ours = state.exists() and config.resume
    if state.exists() and not config.resume:
        raise ValueError(
            f"{state} holds an earlier search: pass --resume to continue it, or another --out for a new search"
        )
    for name in ("config", "hidden"):
        check_output_file(paths[name], "the output", ours=ours)
    return paths


def load_valid_set(path: str, limit: int | None) -> list[dict]:
    """The authors' validation format: one JSON object with string "input" and "output" per line."""
    examples = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                example = json.loads(line)
            except ValueError as err:
                raise ValueError(f"--valid_set {path} line {number} is not JSON ({err}); one object a line") from None
            if not isinstance(example, dict) or not all(isinstance(example.get(k), str) for k in ("input", "output")):
                raise ValueError(f'--valid_set {path} line {number}: give {{"input": "...", "output": "..."}}')
            examples.append(example)
    if not examples:
        raise ValueError(f"--valid_set {path} holds no examples; one JSON object a line")
    return examples[:limit]


def parse_layers(text: str) -> list[int]:
    """`10-25` or `3,5,8-9` as a sorted list of layer indices (a ValueError names the problem)."""
    layers: set[int] = set()
    for part in str(text).split(","):
        match = _RANGE.fullmatch(part.strip())
        if match is None:
            raise ValueError(f"--layers {text!r}: give comma-separated indices or ranges A-B, e.g. 10-25 or 2,4,6-8")
        first, last = int(match[1]), int(match[2] or match[1])
        if last < first:
            raise ValueError(f"--layers {text!r}: the range {part.strip()} runs backwards; write it low-high")
        layers.update(range(first, last + 1))
    return sorted(layers)


def add_arguments(parser: ConfigParser) -> None:
    parser.description = DESCRIPTION
    add_dataclass_options(parser, PositionalDims)
