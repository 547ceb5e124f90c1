"""Found in the Middle's positional bias, measured once and reused: this project's extension, not the paper's method.

The paper measures bias(k) for every prompt (Eq. 3): K extra prefills, each
with a content-free dummy document in slot k, so a prompt costs K + 1
prefills before it is answered. The amortised form estimates bias(k) once per
model, prompt template, number of items and item-length bucket, as the mean
Attn(x_dum, k) over N calibration prompts that are not evaluation prompts,
and stores it in a versioned JSON file. At evaluation, rel(x_k) = Attn(x_k, k)
− bias(k) needs only the prompt's own attention, which the harness's prefill
records (`FoundInTheMiddle` with `calibration=amortised`).

What a file is valid for, checked on every use (one line naming what differs):
- the model: its config hash and a weights fingerprint;
- the template: a hash of each prompt's tokens before its first item (the
  task's instruction, with the chat template's header and system prompt);
- the number of items K, the dummy document and the layers averaged;
- the item-length bucket of each prompt (mean tokens per item, in powers of
  two: 32-63, 64-127, ...): a prompt of a bucket the file lacks is refused.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from evaluation.model_identity import model_identity, weights_fingerprint
from repo_common.atomic import write_json_atomic

FORMAT = "fim-bias"
VERSION = 1
#: How to make a file, for the refusals' fix.
MAKE_ONE = "make one with python -m evaluation calibrate-fim on calibration prompts of this model and task"


def model_key(model) -> dict[str, str]:
    """What the bias depends on in the model: its config and its weights (name kept for the reader)."""
    identity = model_identity(model)
    return {"name": identity["name"], "config_sha256": identity["config_sha256"], "weights": weights_fingerprint(model)}


def template_fingerprint(input_ids: Sequence[int], item_spans: Sequence[Sequence[int]]) -> str:
    """A hash of the tokens before the first item: the part of a prompt its template alone decides."""
    first = min((start for start, end in item_spans if end > start), default=len(input_ids))
    return hashlib.sha256(json.dumps(list(input_ids[:first])).encode()).hexdigest()[:16]


def length_bucket(item_spans: Sequence[Sequence[int]]) -> str:
    """The prompt's item-length bucket: mean tokens per non-empty item, in [2^j, 2^(j+1) - 1]."""
    lengths = [end - start for start, end in item_spans if end > start]
    mean = sum(lengths) / len(lengths) if lengths else 1.0
    low = 2 ** math.floor(math.log2(max(mean, 1.0)))
    return f"{low}-{2 * low - 1}"


@dataclass
class BiasFile:
    """The contents of a bias file (format `fim-bias`, version 1)."""

    model: dict[str, str]
    template: str
    num_items: int
    dummy: str
    score_layers: list[int]
    buckets: dict[str, dict[str, Any]]
    """Per item-length bucket: `prompts` (N), `bias` (mean Attn(x_dum, k) per slot k) and `std` (its spread)."""
    calibration: dict[str, Any] = field(default_factory=dict)
    """Where the calibration prompts came from (task, parameters, example range), for the reader."""

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": VERSION, **asdict(self)}

    @classmethod
    def from_json(cls, data: Any, path: str | Path) -> BiasFile:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f"fim: {path} is not a Found-in-the-Middle bias file (no format '{FORMAT}'); {MAKE_ONE}")
        if data.get("version") != VERSION:
            raise ValueError(
                f"fim: bias file {path} has version {data.get('version')!r}, this code reads version {VERSION}; "
                f"{MAKE_ONE}"
            )
        try:
            bias = cls(**{k: v for k, v in data.items() if k not in ("format", "version")})
        except TypeError as err:
            raise ValueError(f"fim: bias file {path} is malformed ({err}); {MAKE_ONE}") from None
        problem = bias.content_problem()
        if problem:
            raise ValueError(f"fim: bias file {path} is malformed ({problem}); {MAKE_ONE}")
        return bias

    def content_problem(self) -> str | None:
        """What is wrong with the values, or None: a hand-edited or damaged file must not bias the answers
        silently (a NaN or a list of the wrong length would otherwise reach the attention scores)."""
        if not isinstance(self.model, dict) or not all(isinstance(v, str) for v in self.model.values()):
            return "model must be an object of strings"
        for name in ("template", "dummy"):
            if not isinstance(getattr(self, name), str):
                return f"{name} must be a string"
        if isinstance(self.num_items, bool) or not isinstance(self.num_items, int) or self.num_items < 1:
            return f"num_items must be an integer >= 1, got {self.num_items!r}"
        if not isinstance(self.score_layers, list) or not all(
            isinstance(layer, int) and not isinstance(layer, bool) for layer in self.score_layers
        ):
            return "score_layers must be a list of integers"
        if not isinstance(self.buckets, dict) or not self.buckets:
            return "buckets must be a non-empty object"
        for name, bucket in self.buckets.items():
            values = bucket.get("bias") if isinstance(bucket, dict) else None
            if not isinstance(values, list) or len(values) != self.num_items:
                return f"bucket {name}: bias must be a list of {self.num_items} numbers (one per item)"
            if not all(_finite_number(v) for v in values):
                return f"bucket {name}: bias holds a value that is not a finite number"
        return None

    def check(self, path: str | Path, **expected: Any) -> None:
        """Refuse, in one line naming what differs, a file made for another model, template, item count,
        dummy or layers (`expected` holds this run's values of those fields)."""
        names = {
            "model": "model",
            "template": "prompt template",
            "num_items": "number of items",
            "dummy": "dummy document",
            "score_layers": "score layers",
        }
        for key, value in expected.items():
            stored = getattr(self, key)
            if stored == value:
                continue
            if key == "model":
                stored, value = _model_words(stored), _model_words(value)
            raise ValueError(
                f"fim: bias file {path} was made for another {names[key]} ({stored}), these prompts have {value}; "
                f"{MAKE_ONE}"
            )

    def bias(self, path: str | Path, bucket: str) -> torch.Tensor:
        """bias(k) `[K]` of an item-length bucket (a bucket the file lacks is refused in one line)."""
        if bucket not in self.buckets:
            raise ValueError(
                f"fim: bias file {path} has no item-length bucket {bucket} tokens (it has {sorted(self.buckets)}); "
                "calibrate with prompts whose items are that long"
            )
        return torch.tensor(self.buckets[bucket]["bias"], dtype=torch.float32)


def _finite_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _model_words(key: dict[str, str]) -> str:
    return f"{key.get('name')}, config {key.get('config_sha256')}, weights {key.get('weights')}"


def read_bias_file(path: str | Path) -> BiasFile:
    """A bias file, checked for format and version (a missing or unreadable file is refused in one line)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"fim: bias file {path} does not exist; {MAKE_ONE}")
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"fim: cannot read bias file {path} ({err}); {MAKE_ONE}") from None
    return BiasFile.from_json(data, path)


def write_bias_file(path: str | Path, bias: BiasFile) -> Path:
    """Write the file atomically (a reader never sees half of it)."""
    return write_json_atomic(path, bias.to_json())


def summarize_bias(dummy_attention: torch.Tensor, buckets: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Per bucket, the mean and standard deviation over its prompts of Attn(x_dum, k) `[N, K]`."""
    out = {}
    for bucket in sorted(set(buckets)):
        rows = dummy_attention[[i for i, b in enumerate(buckets) if b == bucket]].double()
        std = rows.std(dim=0, correction=1) if rows.shape[0] > 1 else torch.zeros(rows.shape[1], dtype=torch.float64)
        out[bucket] = {"prompts": rows.shape[0], "bias": rows.mean(dim=0).tolist(), "std": std.tolist()}
    return out
