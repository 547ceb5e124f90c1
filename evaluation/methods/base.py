"""The `Method` interface: how a training-free method plugs into generation, plus its registry and spec parser.

A method is configured from a spec string `name:key=value,key2=value` and may
act at four points, all optional (the defaults do nothing):

- `attach(model, tokenizer)` / `detach(model)`: install / remove things on the
  model once per run, typically position policies per layer (`PolicyMethod`);
- `start(state)` / `finish(state)`: per generated batch, e.g. tell an attention
  hook where this batch's documents are;
- `prefill_position_ids(batch)`: the positions of the prompt tokens (CALIOPE
  remaps them by document chunk); generated tokens continue from max + 1;
- `process_logits(step, logits, state)`: the float32 logits of every step
  (PCD contrasts them with a second forward it runs through its own cache,
  kept in `state.scratch_for(self)`);
- `row_groups()`: copies of the batch the harness should decode as extra
  rows of its own forward under other policies (Attention Buckets' bases,
  PCD's over-rotated encoding; `evaluation.methods.row_groups`); their logits
  reach `process_logits` through `state.row_group_logits(self)`.

Methods stack: `MethodStack` applies them in order (attach in order, detach in
reverse; each `prefill_position_ids` sees the positions chosen before it in
`batch.position_ids`; logits flow through each `process_logits` in turn).

This module imports neither torch nor transformers (tensors appear only in annotations): `evaluation run`
builds its parser and resolves its configuration from these classes and the registry's names, and loads a
method's own module, with torch, only when a spec or a class entry names it (`repo_common.registry`).
"""

from __future__ import annotations

import dataclasses
import re
import typing
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from repo_common.registry import Registry

if TYPE_CHECKING:
    import torch

    from repo_train.modeling import PositionPolicy


@dataclass
class GenerationBatch:
    """A left-padded batch as methods see it before the prefill.

    `item_token_spans[row]` are the [start, end) token indices of each task item
    (document, KV line) in the *padded* row, so `input_ids[row, s:e]` is item i.
    `position_ids` holds the positions chosen so far (HF's cumsum(mask) - 1,
    then each method's replacement in stack order). `rows` carries per-row
    metadata (the runner gives id, example_id, num_positions; never the answer).
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    position_ids: torch.Tensor
    item_token_spans: list[list[tuple[int, int]]]
    pad_lengths: list[int]
    truncated: list[bool] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class GenerationState:
    """What a method can read (and keep) during one batch's generation; refreshed before each `process_logits`."""

    model: Any
    tokenizer: Any
    batch: GenerationBatch
    step: int = -1
    #: Tokens of the forward that produced the current logits: the prompt at step 0, then `[B, 1]`.
    input_ids: torch.Tensor | None = None
    position_ids: torch.Tensor | None = None
    #: Mask over everything in the cache after that forward (prompt + generated).
    attention_mask: torch.Tensor | None = None
    past_key_values: Any = None
    finished: torch.Tensor | None = None
    #: Tokens chosen so far, `[B, steps]` (finished rows get the pad token).
    generated: torch.Tensor | None = None
    scratch: dict[int, dict[str, Any]] = field(default_factory=dict)
    #: This step's logits `[B, V]` of each method's row groups (by method id), in the order it asked for them.
    group_logits: dict[int, list[torch.Tensor]] = field(default_factory=dict)
    #: True when the batch's continuations are given and teacher-forced (`decoding.score_continuations`), not
    #: generated.
    teacher_forced: bool = False

    def observe(self, step, input_ids, position_ids, attention_mask, past_key_values, finished) -> None:
        self.step, self.input_ids, self.position_ids = step, input_ids, position_ids
        self.attention_mask, self.past_key_values, self.finished = attention_mask, past_key_values, finished

    def scratch_for(self, method: Method) -> dict[str, Any]:
        """A per-method dict living for this batch (e.g. a second KV cache)."""
        return self.scratch.setdefault(id(method), {})

    def row_group_logits(self, method: Method) -> list[torch.Tensor]:
        """The float32 logits `[B, V]` of this step for each of `method`'s row groups (empty if it asked for none)."""
        return self.group_logits.get(id(method), [])


@dataclass
class Method:
    """Base class: dataclass fields are the spec's parameters; every hook defaults to a no-op.

    Keep run-time state in `field(init=False)` fields or `state.scratch_for(self)`, never in parameters.
    """

    name: ClassVar[str] = "method"

    def attach(self, model, tokenizer) -> None:
        """Install what the method needs on the model (once per run)."""

    def detach(self, model) -> None:
        """Undo `attach`, leaving the model as it was."""

    def start(self, state: GenerationState) -> None:
        """A batch is about to be generated (`state.batch` is set)."""

    def finish(self, state: GenerationState) -> None:
        """The batch is done (also after an error)."""

    def prefill_position_ids(self, batch: GenerationBatch) -> torch.Tensor | None:
        """Positions `[B, S]` (long or float) for the prompt tokens, or None to keep `batch.position_ids`."""
        return None

    def process_logits(self, step: int, logits: torch.Tensor, state: GenerationState) -> torch.Tensor:
        """Next-token logits `[B, V]` (float32) of step `step`; return the logits to pick the argmax from."""
        return logits

    def row_groups(self) -> list[list[PositionPolicy]]:
        """Policies (one per layer) of each extra copy of the batch to decode in the harness's forward; read
        once per batch, after `start`. The copies share the forward's weight reads and one KV cache."""
        return []

    def forced_scoring_problem(self, model) -> str | None:
        """Why a teacher-forced log-likelihood (`--score gold_loglik`) is undefined under this method (with the
        fix), else None; asked once the method is attached, before any prompt is scored."""
        return None

    def params(self) -> dict[str, Any]:
        """The spec parameters: dataclass fields set by `__init__` (state kept in `field(init=False)` is not one)."""
        return {f.name: getattr(self, f.name) for f in spec_fields(type(self))}

    def spec(self) -> str:
        """The canonical spec: name and every parameter, so equal specs mean equal configurations."""
        params = self.params()
        if not params:
            return self.name
        return self.name + ":" + ",".join(f"{k}={_format_value(v)}" for k, v in params.items())


def spec_fields(cls: type[Method]) -> list[dataclasses.Field]:
    return [f for f in dataclasses.fields(cls) if f.init]


#: Every method by its spec name. The built-ins are named by their class path and their module (torch and all) is
#: imported when a spec first names one; `register_method` adds a user's class as it is defined.
METHODS: Registry[type[Method]] = Registry(
    "method",
    {
        "baseline": "evaluation.methods.base.Baseline",
        "caliope": "evaluation.methods.caliope.Caliope",
        "fim": "evaluation.methods.found_in_middle.FoundInTheMiddle",
        "lpes": "evaluation.methods.lpes.method.LayerScaledRope",
        "pcd": "evaluation.methods.pcd.PositionalContrastiveDecoding",
        "pi": "evaluation.methods.pi.PositionInterpolation",
        "ms_poe": "evaluation.methods.scaling_baselines.MsPoE",
        "attention_buckets": "evaluation.methods.scaling_baselines.AttentionBuckets",
        "positional_hidden": "evaluation.methods.positional_hidden.PositionalHidden",
        "string": "evaluation.methods.string.String",
    },
)


def register_method(cls: type[Method]) -> type[Method]:
    """Class decorator: make a method buildable from a spec by its `name`."""
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls.__name__} must be a dataclass (its fields are the spec parameters)")
    return METHODS.register(cls)


def _format_value(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return repr(value).removesuffix(".0")
    return str(value)


def parse_value(text: str) -> int | float | bool | str:
    """A spec value: true/false -> bool, then int, then float, else the string itself."""
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text.strip()


_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]*$")


def parse_method_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """`name:key=value,key2=value` -> (name, {key: parsed value}); syntax errors say what is wrong."""
    name, _, rest = spec.strip().partition(":")
    if not _NAME.match(name):
        raise ValueError(f"bad method spec {spec!r}: expected NAME or NAME:key=value,... (e.g. 'pi:scale=2')")
    params: dict[str, Any] = {}
    for item in filter(None, (part.strip() for part in rest.split(","))) if rest else ():
        key, eq, value = item.partition("=")
        if not eq or not key.strip() or not value.strip():
            raise ValueError(f"bad parameter {item!r} in method spec {spec!r}: write key=value (e.g. 'pi:scale=2')")
        if key.strip() in params:
            raise ValueError(f"parameter {key.strip()!r} given twice in method spec {spec!r}")
        params[key.strip()] = parse_value(value)
    return name, params


def _coerce(cls: type[Method], key: str, value: Any) -> Any:
    """Match a parsed value to the field's declared type (int -> float is fine, the rest must agree)."""
    hint = typing.get_type_hints(cls).get(key)
    allowed = typing.get_args(hint) or (hint,)
    if value is None and type(None) in allowed:  # a config file's null for an optional parameter
        return None
    if float in allowed and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if str in allowed and not isinstance(value, str):
        return _format_value(value)
    types = tuple(t for t in allowed if isinstance(t, type))
    if types and not isinstance(value, types) or (isinstance(value, bool) and bool not in allowed):
        names = " or ".join(t.__name__ for t in types)
        raise ValueError(f"method {cls.name!r}: {key} must be {names}, got {value!r}")
    return value


def build_method(spec: str) -> Method:
    """The registered method a spec names, configured with its parameters (unknown keys list the valid ones)."""
    name, params = parse_method_spec(spec)
    return configure_method(METHODS.lookup(name), params)


def configure_method(cls: type[Method], params: Mapping[str, Any]) -> Method:
    """`cls` configured with `params` as a spec would configure it: values matched to the fields' types, unknown
    and missing parameters refused, and the result's spec one that reads back as this method (records are keyed
    by it). A class entry of a config file (`class_path` + `init_args`) is built here, without a spec string."""
    fields = {f.name: f for f in spec_fields(cls)}
    unknown = sorted(set(params) - set(fields))
    if unknown:
        raise ValueError(
            f"unknown parameter(s) {unknown} for method {cls.name!r}; valid parameters are {sorted(fields)}"
        )
    missing = [
        f.name
        for f in fields.values()
        if f.name not in params and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise ValueError(f"method {cls.name!r} needs parameter(s) {missing}, e.g. '{cls.name}:{missing[0]}=...'")
    method = cls(**{key: _coerce(cls, key, value) for key, value in params.items()})
    for key, value in method.params().items():
        text = _format_value(value)
        if "," in text or _STACK_SPLIT.search(text) or text != text.strip():
            raise ValueError(
                f"method {cls.name!r}: {key}={text!r} cannot be part of its spec (the label of its records): "
                "a ',' or a '+' before a letter would read as another parameter or method, and spaces at either "
                "end are dropped; choose a value without them (e.g. rename the file)"
            )
    return method


#: `a+b:k=v` stacks a then b; a '+' followed by a letter starts a new method (so 1e+3 stays a number).
_STACK_SPLIT = re.compile(r"\+(?=[A-Za-z_])")


def split_stack_spec(spec: str) -> list[str]:
    """The method specs of a stack spec, in order: `'caliope:calibrator=moses+pi:scale=2'` -> two specs."""
    return [part.strip() for part in _STACK_SPLIT.split(spec.strip()) if part.strip()]


class MethodStack:
    """Several methods applied in order; what the runner and `generate_batch` talk to."""

    def __init__(self, methods: list[Method]):
        self.methods = list(methods)

    @classmethod
    def parse(cls, spec: str) -> MethodStack:
        """`'baseline'`, `'pi:scale=2'` or a stack `'caliope+pi:scale=2'`."""
        parts = split_stack_spec(spec)
        if not parts:
            raise ValueError("empty method spec; use e.g. 'baseline' or 'pi:scale=2'")
        return cls([build_method(part) for part in parts])

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MethodStack) and self.methods == other.methods

    __hash__ = None  # mutable, compared by its methods

    def __repr__(self) -> str:
        return f"MethodStack({self.label!r})"

    @property
    def label(self) -> str:
        """Canonical name of the stack, e.g. 'pi:scale=2' ('baseline' for an empty stack)."""
        return "+".join(m.spec() for m in self.methods) or "baseline"

    @contextmanager
    def attached(self, model, tokenizer) -> Iterator[MethodStack]:
        """Attach every method in order for the duration of the block; detach in reverse, even on errors."""
        done: list[Method] = []
        try:
            for method in self.methods:
                method.attach(model, tokenizer)
                done.append(method)
            yield self
        finally:
            for method in reversed(done):
                method.detach(model)

    def start(self, state: GenerationState) -> None:
        for method in self.methods:
            method.start(state)

    def finish(self, state: GenerationState) -> None:
        for method in reversed(self.methods):
            method.finish(state)

    def prefill_position_ids(self, batch: GenerationBatch) -> torch.Tensor:
        for method in self.methods:
            positions = method.prefill_position_ids(batch)
            if positions is None:
                continue
            if tuple(positions.shape) != tuple(batch.input_ids.shape):
                raise ValueError(
                    f"method {method.spec()!r} returned prefill positions of shape {tuple(positions.shape)}; "
                    f"expected {tuple(batch.input_ids.shape)} (one per prompt token)"
                )
            batch.position_ids = positions.to(batch.input_ids.device)
        return batch.position_ids

    def process_logits(self, step: int, logits: torch.Tensor, state: GenerationState) -> torch.Tensor:
        for method in self.methods:
            logits = method.process_logits(step, logits, state)
        return logits


@register_method
@dataclass
class Baseline(Method):
    """The model as it is: no hook does anything."""

    name: ClassVar[str] = "baseline"


#: The hooks a method acts through while generating; a log-likelihood task (multiple choice) runs none of them.
GENERATION_HOOKS = ("start", "finish", "prefill_position_ids", "process_logits")


def refuse_generation_hooks(stack: MethodStack, task_name: str) -> None:
    """A method acting through generation hooks would silently do nothing on a log-likelihood task: refused in one
    line (`RunConfig` checks every such task before any work, so a mixed task list is refused before it starts)."""
    for method in stack.methods:
        hooks = [h for h in GENERATION_HOOKS if getattr(type(method), h) is not getattr(Method, h)]
        if hooks:
            raise ValueError(
                f"method {method.spec()!r} acts through {hooks}, which log-likelihood scoring "
                f"({task_name!r}) does not run; evaluate it on generation tasks only"
            )
