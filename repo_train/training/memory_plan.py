"""Per-GPU peak memory of a `fit` step, worked out from the config before any GPU is allocated.

A researcher sizes the micro batch, activation checkpointing and GPU count of a
multi-day run from this, so each term is counted the way the code in this
project actually holds memory, and the total is checked against measurements:

- **States** (per rank): under DeepSpeed ZeRO-2 with bf16, the bf16 weights (2N), the bf16 gradients of
  this rank's partition (2N/P), the float32 master weights and Adam moments (12N/P) and, during the
  optimizer step only, the float32 gradient partition (4N/P); with P > 1, DeepSpeed's reduce and
  all-gather buckets (stages 0, 1 and 3 shard less or more, counted alike). FSDP2 shards all of it
  (float32 weights, gradients and moments, 16N/P) and gathers in bf16 two layers at a time (one
  computing, one prefetched) and the embeddings and head. DDP keeps everything whole (16N) plus its
  gradient buckets (4N).
- **Activations**: what autograd saves for backward, per token and layer, counted tensor by tensor from
  the OLMo-2 layer (`layer_saved_bytes`): the layer input and the MLP input in the model's dtype, each
  RMSNorm's float32 upcast and normalised output (OLMo-2 normalises q and k too), SDPA's q, k, v, output
  and float32 log-sum-exp, the four SwiGLU tensors, plus what each layer's position policy keeps
  (`PositionPolicy.saved_bytes_per_token`: REPO's predictor). A checkpointed layer keeps its input only,
  and backward recomputes one layer at a time.
- **The loss**: the whole micro batch's logits go through a float32 cross-entropy and z-loss; measured on
  the CPU allocator, forward and backward of `objective.lm_loss` peak at 20 bytes per logit, for bf16 and
  float32 logits alike (the float32 logits, log-softmax, the gathered input of log Z and their gradients).
  A chunked loss (`model.loss_chunk_tokens`) holds one chunk's logits instead.

The peak is the larger of the backward peak (states + saved activations + the larger of the loss and one
recomputed layer) and the optimizer step's (states with the float32 gradients). Checked in
tests/training/test_memory_plan.py against saved-tensor hooks on the CPU (the activation term) and against
the peaks measured on one H200 (docs/benchmarks.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from repo_train.modeling.accounting import config_parameter_report
from repo_train.modeling.methods import build_policies
from repo_train.training.activation_checkpointing import recomputed_parts

GIB = 2**30
#: Bytes the loss holds at its peak per logit (tokens × vocabulary), bf16 or float32 logits: measured with the
#: CPU allocator trace (tests/training/test_memory_plan.py).
LOSS_BYTES_PER_LOGIT = 20
#: A fit "fits" when its predicted peak leaves this share of the GPU's memory free: the allocator's cache and
#: fragmentation (reserved above allocated), the CUDA context and kernels' workspaces live there.
HEADROOM = 0.10
STRATEGIES = ("deepspeed", "fsdp2", "ddp", "single")


@dataclass(frozen=True)
class MemorySetting:
    """What decides a step's memory: the model, the tokens of one micro batch, and the engine."""

    config: object  # a RePoOlmo2Config (or any config with its fields)
    seq_len: int
    micro_batch: int
    world_size: int = 1
    strategy: str = "deepspeed"  # one of STRATEGIES
    zero_stage: int = 2
    precision: str = "bf16-mixed"
    activation_checkpointing: bool | str = False
    loss_chunk_tokens: int = 0
    reduce_bucket_elements: int = 200_000_000  # zero2.json's reduce_bucket_size and allgather_bucket_size

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ValueError(f"strategy {self.strategy!r}: the memory plan knows {', '.join(STRATEGIES)}")
        if self.strategy == "deepspeed" and self.zero_stage not in (0, 1, 2, 3):
            raise ValueError(f"DeepSpeed ZeRO stage {self.zero_stage}: the stages are 0 to 3")

    @property
    def tokens(self) -> int:
        return self.seq_len * self.micro_batch

    @property
    def dtype_bytes(self) -> int:
        """Bytes of the floats the layers compute in: bf16 unless the run is 32-bit."""
        return 4 if str(self.precision).startswith("32") else 2


@dataclass
class MemoryPlan:
    """Bytes per GPU of each term at the step's peak, and the peak."""

    setting: MemorySetting
    parts: dict[str, float] = field(default_factory=dict)
    peak: float = 0.0
    phase: str = ""  # "backward" or "optimizer step": where the peak is

    def fits(self, gpu_memory_gib: float, headroom: float = HEADROOM) -> bool:
        return self.peak <= (1.0 - headroom) * gpu_memory_gib * GIB

    def table(self) -> str:
        """One line a term and the peak, in GiB (MiB for a peak under 1 GiB, a model of the CPU's size)."""
        unit, scale = ("GiB", GIB) if self.peak >= GIB else ("MiB", 2**20)
        lines = [f"  {name:<46} {value / scale:8.2f} {unit}" for name, value in self.parts.items()]
        return "\n".join([*lines, f"  {'peak (' + self.phase + ')':<46} {self.peak / scale:8.2f} {unit}"])


#: `recomputed_parts`' answer for a layer -> what `kept_bytes` calls it.
_RECOMPUTED = {None: "none", "": "layer", "self_attn": "attention", "mlp": "mlp"}


def checkpointing_plan(mode: bool | str, layers: int) -> list[str]:
    """What each decoder layer recomputes under `model.activation_checkpointing` = `mode`, as the module wraps it
    (`activation_checkpointing.recomputed_parts`): "none", "layer", "attention" or "mlp"."""
    return [_RECOMPUTED[part] for part in recomputed_parts(mode, layers)]


def layer_saved_bytes(config, dtype_bytes: int, policy_bytes: int = 0) -> dict[str, int]:
    """Bytes per token one OLMo-2 decoder layer saves for backward, by part (no checkpointing).

    `attention` includes the layer input (shared by the q, k and v projections), the q and k RMSNorms
    (float32 upcast + normalised output, 8 bytes a channel, and a float32 inverse RMS per token), SDPA's
    q, k, v and output (the output projection's input is the same tensor) and float32 log-sum-exp, and
    the position policy's bytes; `mlp` its input and the gate, SiLU, up and product tensors; each of the
    two post-norms (OLMo-2 normalises the sublayers' outputs) 8 bytes a channel + 4.
    """
    d, f, p = config.hidden_size, config.intermediate_size, dtype_bytes
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    head_dim = getattr(config, "head_dim", None) or d // heads
    q_width, kv_width = heads * head_dim, kv_heads * head_dim
    norm = 8  # float32 copy of the input + float32 normalised output, per channel
    attention = (
        p * d
        + (norm * q_width + 4)
        + (norm * kv_width + 4)
        + p * (2 * q_width + 2 * kv_width)
        + 4 * heads
        + policy_bytes
    )
    return {
        "attention": attention,
        "attention_norm": norm * d + 4,
        "mlp": p * d + 4 * p * f,
        "mlp_norm": norm * d + 4,
    }


def kept_bytes(parts: dict[str, int], recompute: str, dtype_bytes: int, hidden: int) -> int:
    """Bytes per token a layer keeps until backward when `recompute` ("none", "layer", "attention", "mlp")
    is recomputed: a recomputed part keeps only its input."""
    if recompute == "none":
        return sum(parts.values())
    if recompute == "layer":
        return dtype_bytes * hidden
    kept = dict(parts)
    kept[recompute] = dtype_bytes * hidden
    return sum(kept.values())


def activation_bytes(setting: MemorySetting) -> tuple[int, int]:
    """(bytes the decoder and the LM head's input keep for backward, bytes of the largest recomputed layer)."""
    config, p = setting.config, setting.dtype_bytes
    plan = checkpointing_plan(setting.activation_checkpointing, config.num_hidden_layers)
    kept_per_token, recomputed = 0, 0
    for recompute, policy in zip(plan, build_policies(config), strict=True):
        parts = layer_saved_bytes(config, p, policy.saved_bytes_per_token(p))
        kept_per_token += kept_bytes(parts, recompute, p, config.hidden_size)
        if recompute != "none":
            recomputed = max(recomputed, sum(parts.values()) - kept_bytes(parts, recompute, p, config.hidden_size))
    # the input ids (int64), the final norm, and the LM head's input
    kept_per_token += 8 + (8 * config.hidden_size + 4) + p * config.hidden_size
    return kept_per_token * setting.tokens, recomputed * setting.tokens


def loss_bytes(setting: MemorySetting) -> int:
    """Peak bytes of the loss's forward and backward: every logit of the micro batch, or one chunk's."""
    tokens = setting.tokens
    if setting.loss_chunk_tokens:
        tokens = min(tokens, setting.loss_chunk_tokens)
    return LOSS_BYTES_PER_LOGIT * tokens * setting.config.vocab_size


def state_bytes(setting: MemorySetting, parameters: int, layer_parameters: int) -> tuple[dict[str, float], float]:
    """(states held through backward by name, what the optimizer step adds) per rank, in bytes."""
    n, ranks, p = parameters, setting.world_size, setting.dtype_bytes
    layers_total = layer_parameters * setting.config.num_hidden_layers
    half = p == 2 and not str(setting.precision).startswith("32")
    if setting.strategy == "deepspeed":  # stage 2 is checked on a GPU; 0, 1 and 3 follow the same counting
        stage = setting.zero_stage
        states = {
            "weights" if stage < 3 else "weights (sharded)": p * n / (ranks if stage == 3 else 1),
            "gradients" + (" (this rank's partition)" if stage >= 2 else ""): p * n / (ranks if stage >= 2 else 1),
            "optimizer (master + Adam" + (", sharded)" if stage else ")"): (12 if half else 8)
            * n
            / (ranks if stage else 1),
        }
        if stage == 3:
            states["gathered weights (2 layers, embeddings, head)"] = p * (2 * layer_parameters + (n - layers_total))
        if ranks > 1:
            states["DeepSpeed reduce/all-gather buckets"] = 2 * setting.reduce_bucket_elements * p
        return states, (4 * n / (ranks if stage else 1) if half else 0.0)
    if setting.strategy == "fsdp2":
        return {
            "weights (float32, sharded)": 4 * n / ranks,
            "gradients (float32, sharded)": 4 * n / ranks,
            "optimizer (Adam, sharded)": 8 * n / ranks,
            "gathered weights (2 layers, embeddings, head)": p * (2 * layer_parameters + (n - layers_total)),
        }, 0.0
    states = {"weights": 4 * n, "gradients": 4 * n, "optimizer (Adam)": 8 * n}
    if setting.strategy == "ddp" and ranks > 1:
        states["DDP gradient buckets"] = 4 * n
    if half:
        states["bf16 weight copies (autocast)"] = 2 * n
    return states, 0.0


def plan_memory(setting: MemorySetting) -> MemoryPlan:
    """The per-GPU peak of one training step of `setting` (see the module docstring for each term)."""
    config = setting.config
    parameters = config_parameter_report(config).total
    embeddings = config.vocab_size * config.hidden_size * (1 if getattr(config, "tie_word_embeddings", False) else 2)
    layer_parameters = (parameters - embeddings) // max(1, config.num_hidden_layers)
    states, step_extra = state_bytes(setting, parameters, layer_parameters)
    kept, recomputed = activation_bytes(setting)
    loss = loss_bytes(setting)
    plan = MemoryPlan(setting, parts=dict(states))
    plan.parts["activations kept for backward"] = kept
    plan.parts["loss (logits, float32 CE)"] = loss
    if recomputed:
        plan.parts["one recomputed layer"] = recomputed
    held = sum(states.values())
    backward = held + kept + max(loss, recomputed)
    step = held + step_extra
    if step_extra:
        plan.parts["float32 gradients at the step"] = step_extra
    plan.peak, plan.phase = (backward, "backward") if backward >= step else (step, "optimizer step")
    return plan


def settings_that_fit(setting: MemorySetting, gpu_memory_gib: float, global_batch: int) -> list[tuple[str, MemoryPlan]]:
    """Changes of `setting` that would fit `gpu_memory_gib` with the headroom, cheapest in speed first:
    a chunked loss at the same micro batch, smaller micro batches that keep the global batch (accumulation
    takes the rest), then activation checkpointing. Each as the `fit` options that make it."""
    found = []
    candidates: list[tuple[str, MemorySetting]] = []
    if not setting.loss_chunk_tokens:
        candidates.append(("--model.loss_chunk_tokens 4096", replace(setting, loss_chunk_tokens=4096)))
    chunk = setting.loss_chunk_tokens or 4096
    chunk_option = "" if setting.loss_chunk_tokens else " --model.loss_chunk_tokens 4096"
    for micro in range(setting.micro_batch - 1, 0, -1):
        if global_batch % (micro * setting.world_size) == 0:
            candidates.append(
                (
                    f"--data.micro_batch_size {micro}{chunk_option}",
                    replace(setting, micro_batch=micro, loss_chunk_tokens=chunk),
                )
            )
    if str(setting.activation_checkpointing).lower() in ("false", "none"):
        candidates.append(
            (
                f"--model.activation_checkpointing true{chunk_option}",
                replace(setting, activation_checkpointing=True, loss_chunk_tokens=chunk),
            )
        )
    for options, candidate in candidates:
        plan = plan_memory(candidate)
        if plan.fits(gpu_memory_gib):
            found.append((options, plan))
    return found
