"""Found-in-the-Middle (Hsieh et al., Findings of ACL 2024): calibrate positional attention bias, then redistribute.

Equations (paper numbering) -> code, all on the attention row of the current
query, read by `evaluation.attention_probe` (never an L×L matrix):

- Attn(x, k), §2.1: mean over the tokens of document k of the weight from
  the last prompt token, averaged over heads and the chosen layers ->
  `document_attention`.
- Eq. 2-4: Attn(x_doc, k) = rel(x_doc) + bias(k) + ε; a content-free dummy
  document in slot k measures Attn(x_dum, k) = rel(x_dum) + bias(k) + ε, so
  rel(x_doc) = Attn(x_doc, k) − Attn(x_dum, k) up to a constant ->
  `dummy_variants` (the dummy *replaces* document k, so every prompt keeps K
  documents, as Eq. 3's Attn(·, k) is defined), `calibrate_documents` (the
  real prompt and its K dummy variants in one batched prefill),
  `calibrated_relevance`.
- Eq. 5-6: during answer generation, in the chosen layers (default the last
  half), the weight of the current query on token i of document k becomes
  α_k / Attn_orig(k) · attn_orig(k, i) · C with α = softmax(rel / t), C keeping
  the total weight on documents unchanged; the rest of the row is untouched
  -> `calibration_weights`, `redistribute`. Attn_orig(k) is taken per layer,
  head and step (the row being rescaled), so the new per-token mean of
  document k is ∝ α_k (`target="mean"`, the paper's Eq. 6); `target="mass"`
  makes each document's total weight ∝ α_k instead.

`fim:temperature=5e-5,layers=last_half` is the paper's setting (t = 5e-5, last
16 of 32 layers, all heads). Costs per batch: one extra prefill of B·(K+1)
prompts without a cache, and per step an O(L) row per head in the edited
layers. See docs/methods/found-in-the-middle.md for what is simplified.

`calibration=amortised,bias_file=F` is this project's extension, not the
paper's method (`evaluation.methods.fim_bias`): bias(k) comes from a file
estimated once on calibration prompts, Attn(x_k, k) from the harness's own
prefill (recorded, not edited), and the prompt's last token is then run again
over the cache with the edit, so step 0 is answered as the exact form answers
it: one prefill and one extra token per prompt instead of K + 1 prefills.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from evaluation.attention_probe import AttentionProbe, install_probe, probing, remove_probe
from evaluation.methods.base import GenerationState, Method, register_method
from evaluation.methods.decoding import TokenizedPrompt, collate
from evaluation.methods.fim_bias import (
    BiasFile,
    length_bucket,
    model_key,
    read_bias_file,
    summarize_bias,
    template_fingerprint,
)
from repo_train.modeling.attention import attention_modules
from repo_train.modeling.cache_keyword import cache_argument

#: Named dummy documents; `{k}` is the 1-based slot. 'mdqa' keeps the MDQA line's header so only the content is empty.
DUMMY_DOCUMENTS = {"mdqa": "Document [{k}](Title: N/A) N/A", "blank": "N/A"}
TARGETS = ("mean", "mass")
#: exact: the paper's per-prompt dummy prefills; amortised: bias(k) from a bias file (`fim_bias`).
CALIBRATIONS = ("exact", "amortised")


def resolve_layers(spec: str, num_layers: int) -> list[int]:
    """Layer indices of a spec: all, none, last_half, first_half, last_N, first_N, an index, or a range a-b (inclusive)."""
    text = str(spec).strip().lower()
    half = num_layers // 2
    named = {
        "all": range(num_layers),
        "none": range(0),
        "last_half": range(half, num_layers),
        "first_half": range(half),
    }
    if text in named:
        return list(named[text])
    try:
        if text.startswith(("last_", "first_")):
            side, count = text.split("_", 1)
            n = int(count)
            if not 0 <= n <= num_layers:
                raise ValueError
            return list(range(num_layers - n, num_layers)) if side == "last" else list(range(n))
        low, _, high = text.partition("-")
        first, last = int(low), int(high or low)
        if not 0 <= first <= last < num_layers:
            raise ValueError
        return list(range(first, last + 1))
    except ValueError:
        raise ValueError(
            f"bad layer spec {spec!r} for a {num_layers}-layer model; use all, none, last_half, first_half, "
            f"last_N, first_N, an index or an inclusive range a-b within 0..{num_layers - 1}"
        ) from None


def document_index(spans: Sequence[Sequence[Sequence[int]]], length: int) -> torch.Tensor:
    """`[B, length]` long: the document each token belongs to, −1 outside documents.

    A token shared by two spans (BPE across the separator) counts for the later document.
    """
    index = torch.full((len(spans), length), -1, dtype=torch.long)
    for row, row_spans in enumerate(spans):
        for doc, (start, end) in enumerate(row_spans):
            index[row, start:end] = doc
    return index


def _fit_index(doc_index: torch.Tensor, keys: int, device) -> torch.Tensor:
    """The index padded with −1 to `keys` columns (keys generated after the prompt are outside documents)."""
    if doc_index.shape[-1] > keys:
        raise ValueError(f"document index covers {doc_index.shape[-1]} tokens but the attention row has {keys} keys")
    pad = doc_index.new_full((doc_index.shape[0], keys - doc_index.shape[-1]), -1)
    return torch.cat([doc_index, pad], dim=-1).to(device)


def document_masses(weights: torch.Tensor, doc_index: torch.Tensor, num_docs: int) -> torch.Tensor:
    """Total weight per document: `weights [B, ..., K]` -> `[B, ..., D + 1]`, the last bin = outside documents."""
    index = _fit_index(doc_index, weights.shape[-1], weights.device)
    index = index.masked_fill(index < 0, num_docs)
    index = index.view(index.shape[0], *([1] * (weights.dim() - 2)), index.shape[-1]).expand_as(weights)
    out = weights.new_zeros(*weights.shape[:-1], num_docs + 1)
    return out.scatter_add_(-1, index, weights)


def document_attention(layer_rows: Sequence[torch.Tensor], doc_index: torch.Tensor, num_docs: int) -> torch.Tensor:
    """Attn(x, k) `[B, D]`: per-token mean weight on document k, averaged over heads and the given layers.

    Each row is `[B, H, K]` or `[B, K]` (already averaged over heads); every
    token counts equally, so the order of the three averages does not matter.
    Documents without tokens get 0.
    """
    if not layer_rows:
        raise ValueError("document_attention needs the attention row of at least one layer")
    rows = torch.stack([row.float().mean(dim=1) if row.dim() == 3 else row.float() for row in layer_rows])
    mean_row = rows.mean(dim=0)  # [B, K]: mean over layers (and heads)
    mass = document_masses(mean_row, doc_index, num_docs)[:, :num_docs]
    counts = document_masses(torch.ones_like(mean_row), doc_index, num_docs)[:, :num_docs]
    return torch.where(counts > 0, mass / counts.clamp_min(1), torch.zeros_like(mass))


def calibrated_relevance(attention: torch.Tensor, dummy_attention: torch.Tensor) -> torch.Tensor:
    """Eq. 4 without the constant rel(x_dum): rel(x_k) = Attn(x_k, k) − Attn(x_dum, k)."""
    return attention - dummy_attention


def calibration_weights(relevance: torch.Tensor, temperature: float, valid: torch.Tensor | None = None) -> torch.Tensor:
    """α = softmax(rel / t) over each row's valid documents (Eq. 5); invalid documents get 0."""
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature!r}")
    logits = relevance.double() / temperature
    if valid is not None:
        logits = logits.masked_fill(~valid, float("-inf"))
    alpha = torch.softmax(logits, dim=-1).nan_to_num(0.0)  # a row without valid documents: all 0
    return alpha.to(relevance.dtype)


def redistribute(
    weights: torch.Tensor, doc_index: torch.Tensor, alpha: torch.Tensor, target: str = "mean"
) -> torch.Tensor:
    """Eq. 5: rescale the weights `[B, H, R, K]` on each document's tokens, keeping the total on documents.

    `target="mean"`: the per-token mean on document k becomes ∝ α_k (Eq. 6);
    `"mass"`: document k's total weight becomes ∝ α_k. Weights outside
    documents are returned unchanged, so every row still sums to 1.
    """
    if target not in TARGETS:
        raise ValueError(f"target must be one of {list(TARGETS)}, got {target!r}")
    num_docs = alpha.shape[-1]
    index = _fit_index(doc_index, weights.shape[-1], weights.device)
    masses = document_masses(weights, index, num_docs)[..., :num_docs]  # [B, H, R, D]
    total = masses.sum(dim=-1, keepdim=True)
    a = alpha.to(weights.dtype).view(alpha.shape[0], *([1] * (weights.dim() - 2)), num_docs)
    tiny = torch.finfo(weights.dtype).tiny
    if target == "mean":
        counts = document_masses(torch.ones_like(index, dtype=weights.dtype), index, num_docs)[..., :num_docs]
        counts = counts.view_as(a)
        # token scale s_k = C · α_k / mean_k with C = total / Σ_j α_j N_j, so Σ_k s_k · mass_k = total
        scale = total * a * counts / masses.clamp_min(tiny) / (a * counts).sum(dim=-1, keepdim=True).clamp_min(tiny)
    else:
        scale = total * a / masses.clamp_min(tiny) / a.sum(dim=-1, keepdim=True).clamp_min(tiny)
    scale = torch.cat([scale, torch.ones_like(scale[..., :1])], dim=-1)  # outside documents: × 1
    gather = index.masked_fill(index < 0, num_docs)
    gather = gather.view(gather.shape[0], *([1] * (weights.dim() - 2)), gather.shape[-1])
    gather = gather.expand(*weights.shape[:-1], gather.shape[-1])
    return weights * torch.gather(scale, -1, gather)


def dummy_variants(prompt: TokenizedPrompt, dummy_ids: Sequence[Sequence[int]]) -> list[tuple[int, TokenizedPrompt]]:
    """(k, prompt with document k replaced by `dummy_ids[k]`) for every non-empty document k (Eq. 3)."""
    ids, spans = list(prompt.input_ids), list(prompt.item_spans)
    variants = []
    for k, (start, end) in enumerate(spans):
        if end <= start:
            continue
        dummy = list(dummy_ids[k])
        shift = len(dummy) - (end - start)
        new_spans = [
            (s, e) if j < k else ((start, start + len(dummy)) if j == k else (s + shift, e + shift))
            for j, (s, e) in enumerate(spans)
        ]
        variants.append((k, TokenizedPrompt(tuple(ids[:start] + dummy + ids[end:]), tuple(new_spans))))
    return variants


def _row_group_edit(index: torch.Tensor, alpha: torch.Tensor, target: str):
    """The probe's edit for a batch: `redistribute` with the batch's α, also on rows that repeat the batch
    (a stacked method's row groups, `evaluation.methods.row_groups`: the same prompts under other policies)."""

    def edit(layer: int, weights: torch.Tensor) -> torch.Tensor:
        copies = weights.shape[0] // index.shape[0]
        return redistribute(weights, index.repeat(copies, 1), alpha.repeat(copies, 1), target)

    return edit


@dataclass
class Calibration:
    """Per prompt and document `[B, D]`: Attn(x_k, k), Attn(x_dum, k), rel, validity (non-empty), and α once set."""

    attention: torch.Tensor
    dummy_attention: torch.Tensor | None
    relevance: torch.Tensor | None
    valid: torch.Tensor
    alpha: torch.Tensor | None = None


@torch.no_grad()
def last_token_rows(model, probe: AttentionProbe, batch, layers: Sequence[int]) -> list[torch.Tensor]:
    """The last prompt token's attention row `[B, K]` (heads averaged) in each of `layers`, from one prefill of
    the collated `batch` without a cache (also `evaluation.attention_bias`'s measurement)."""
    mask = None if bool((batch.attention_mask == 1).all()) else batch.attention_mask  # as generation does
    probe.request(record=layers, head_mean=True)
    try:
        model(
            input_ids=batch.input_ids,
            attention_mask=mask,
            position_ids=batch.position_ids,
            use_cache=False,
            logits_to_keep=1,
        )
        return [probe.rows[layer][:, -1] for layer in layers]
    finally:
        probe.clear()


def _attention_of(model, probe: AttentionProbe, prompts, layers, pad_token_id) -> list[torch.Tensor]:
    """Attn(x, ·) of each prompt from one batched prefill (no cache), recording only the last row of `layers`."""
    device = next(model.parameters()).device
    batch = collate(prompts, pad_token_id, device)
    rows = last_token_rows(model, probe, batch, layers)
    num_docs = max(len(p.item_spans) for p in prompts)
    attention = document_attention(rows, document_index(batch.item_token_spans, batch.input_ids.shape[1]), num_docs)
    return [attention[i, : len(p.item_spans)].cpu() for i, p in enumerate(prompts)]


def calibrate_documents(
    model,
    probe: AttentionProbe,
    prompts: Sequence[TokenizedPrompt],
    layers: Sequence[int],
    pad_token_id: int,
    dummy_ids: Sequence[Sequence[Sequence[int]]] | None = None,
    chunk_size: int = 0,
) -> Calibration:
    """Attn of every document of every prompt and, with `dummy_ids` (per prompt, per slot), Attn(x_dum, k) and rel.

    All B·(K+1) prompts (each real prompt, then its dummy variants) go
    through batched prefills of `chunk_size` prompts (0 = one prefill for all).
    """
    layers = list(layers)
    if not layers:
        raise ValueError("calibration needs at least one layer to average attention over (score_layers)")
    jobs: list[tuple[int, int, TokenizedPrompt]] = [(b, -1, p) for b, p in enumerate(prompts)]
    if dummy_ids is not None:
        for b, prompt in enumerate(prompts):
            jobs += [(b, k, variant) for k, variant in dummy_variants(prompt, dummy_ids[b])]
    size = chunk_size if chunk_size > 0 else len(jobs)
    results: list[torch.Tensor] = []
    for start in range(0, len(jobs), size):
        chunk = [job[2] for job in jobs[start : start + size]]
        results += _attention_of(model, probe, chunk, layers, pad_token_id)

    num_docs = max(len(p.item_spans) for p in prompts)
    shape = (len(prompts), num_docs)
    attention, dummy = torch.zeros(shape), torch.zeros(shape)
    valid = torch.zeros(shape, dtype=torch.bool)
    for b, prompt in enumerate(prompts):
        for k, (s, e) in enumerate(prompt.item_spans):
            valid[b, k] = e > s
    for (b, k, _), attn in zip(jobs, results):
        if k < 0:
            attention[b, : attn.shape[0]] = attn
        else:
            dummy[b, k] = attn[k]
    if dummy_ids is None:
        return Calibration(attention, None, None, valid)
    return Calibration(attention, dummy, calibrated_relevance(attention, dummy), valid)


@register_method
@dataclass
class FoundInTheMiddle(Method):
    """`fim:temperature=5e-5,layers=last_half`: calibrate document attention per prompt, redistribute while answering."""

    name: ClassVar[str] = "fim"

    temperature: float = 5e-5
    """t of α = softmax(rel / t); the paper's value for all its experiments."""
    layers: str = "last_half"
    """Layers whose current-query attention is redistributed (see `resolve_layers`); 'none' = score only."""
    score_layers: str = "all"
    """Layers averaged into Attn(x, k) for rel."""
    target: str = "mean"
    """'mean': per-token mean on document k ∝ α_k (Eq. 6); 'mass': its total weight ∝ α_k."""
    dummy: str = "mdqa"
    """A name in DUMMY_DOCUMENTS or a literal template ({k} = 1-based slot) of the content-free document."""
    calibration_batch: int = 0
    """Prompts per calibration prefill; 0 = all B·(K+1) of a batch at once."""
    calibration: str = "exact"
    """exact: K dummy prefills per prompt (paper); amortised: bias(k) from `bias_file` (this project's extension)."""
    bias_file: str = ""
    """The bias file of calibration=amortised (`python -m evaluation calibrate-fim` makes one)."""

    last_calibration: Calibration | None = field(default=None, init=False, repr=False, compare=False)
    _state: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.temperature > 0:
            raise ValueError(f"fim: temperature must be > 0, got {self.temperature!r}")
        if self.target not in TARGETS:
            raise ValueError(f"fim: target must be one of {list(TARGETS)}, got {self.target!r}")
        if self.calibration_batch < 0:
            raise ValueError(f"fim: calibration_batch must be >= 0 (0 = all at once), got {self.calibration_batch}")
        try:
            self.dummy_text(1)
        except (KeyError, IndexError, ValueError) as err:
            raise ValueError(f"fim: dummy must be a name in {sorted(DUMMY_DOCUMENTS)} or a text using {{k}}") from err
        if self.calibration not in CALIBRATIONS:
            raise ValueError(f"fim: calibration must be one of {list(CALIBRATIONS)}, got {self.calibration!r}")
        if (self.calibration == "amortised") != bool(self.bias_file):
            raise ValueError(
                "fim: calibration=amortised needs bias_file=PATH, and bias_file is read by calibration=amortised only"
            )

    def params(self) -> dict[str, Any]:
        """The spec parameters; the amortised ones only when used, so the exact form keeps its earlier label."""
        params = super().params()
        if self.calibration == "exact":
            params.pop("calibration"), params.pop("bias_file")
        return params

    @property
    def dummy_template(self) -> str:
        """The dummy document's text with `{k}` for the slot (what a bias file records)."""
        return DUMMY_DOCUMENTS.get(self.dummy, self.dummy)

    def dummy_text(self, slot: int) -> str:
        """The dummy document for 1-based `slot`."""
        return DUMMY_DOCUMENTS.get(self.dummy, self.dummy).format(k=slot)

    def attach(self, model, tokenizer) -> None:
        num_layers = len(attention_modules(model))
        edit, score = resolve_layers(self.layers, num_layers), resolve_layers(self.score_layers, num_layers)
        if not score:
            raise ValueError("fim: score_layers selects no layer; Attn(x, k) needs at least one")
        self._state = {"tokenizer": tokenizer, "edit": edit, "score": score, "dummies": {}}
        if self.calibration == "amortised":
            bias = read_bias_file(self.bias_file)
            bias.check(self.bias_file, model=model_key(model), dummy=self.dummy_template, score_layers=score)
            self._state["bias"] = bias
        self._state["probe"] = install_probe(model)

    def detach(self, model) -> None:
        remove_probe(model)
        self._state = {}

    def _dummy_ids(self, slot: int) -> list[int]:
        cache = self._state["dummies"]
        if slot not in cache:
            cache[slot] = self._state["tokenizer"](self.dummy_text(slot), add_special_tokens=False)["input_ids"]
        return cache[slot]

    def start(self, state: GenerationState) -> None:
        batch = state.batch
        if not any(batch.item_token_spans):
            raise ValueError(
                "fim needs the token span of each document; use a task with item_spans (mdqa) and a fast tokenizer"
            )
        prompts, dummies = [], []
        for row, pad in enumerate(batch.pad_lengths):
            spans = tuple((s - pad, e - pad) for s, e in batch.item_token_spans[row])
            prompts.append(TokenizedPrompt(tuple(batch.input_ids[row, pad:].tolist()), spans))
            dummies.append([self._dummy_ids(k + 1) for k in range(len(spans))])
        probe: AttentionProbe = self._state["probe"]
        if self.calibration == "amortised":
            self._start_amortised(prompts, probe)
            return
        pad_id = state.tokenizer.pad_token_id
        calibration = calibrate_documents(
            state.model, probe, prompts, self._state["score"], pad_id, dummies, self.calibration_batch
        )
        calibration.alpha = calibration_weights(calibration.relevance, self.temperature, calibration.valid)
        self.last_calibration = calibration
        self._request_edit(batch, calibration.alpha)

    def _request_edit(self, batch, alpha: torch.Tensor) -> None:
        """Ask the probe to redistribute the current query row of the edited layers with this batch's α."""
        edit_layers = self._state["edit"]
        if edit_layers:
            device = batch.input_ids.device
            index = document_index(batch.item_token_spans, batch.input_ids.shape[1]).to(device)
            self._state["probe"].request(
                edit=_row_group_edit(index, alpha.to(device), self.target), edit_layers=edit_layers
            )

    def _start_amortised(self, prompts: Sequence[TokenizedPrompt], probe: AttentionProbe) -> None:
        """bias(k) of each row from the file (its template, item count and bucket checked); the harness's
        prefill then records the last prompt token's attention, unedited."""
        bias: BiasFile = self._state["bias"]
        rows = []
        for prompt in prompts:
            bias.check(
                self.bias_file,
                template=template_fingerprint(prompt.input_ids, prompt.item_spans),
                num_items=len(prompt.item_spans),
            )
            rows.append(bias.bias(self.bias_file, length_bucket(prompt.item_spans)))
        self._state["batch_bias"] = torch.stack(rows)
        probe.request(record=self._state["score"], head_mean=True)

    def process_logits(self, step: int, logits: torch.Tensor, state: GenerationState) -> torch.Tensor:
        if self.calibration != "amortised" or step != 0:
            return logits
        return self._answer_with_amortised_bias(state)

    @torch.no_grad()
    def _answer_with_amortised_bias(self, state: GenerationState) -> torch.Tensor:
        """Step 0 of the amortised form: rel from the recorded prefill and the file's bias, then the last prompt
        token again over the cache (its own entry dropped) with the edit: the logits the exact form gets."""
        batch, probe = state.batch, self._state["probe"]
        cache = state.past_key_values
        if cache.layers[0].keys.shape[0] != batch.input_ids.shape[0]:
            raise ValueError(
                "fim:calibration=amortised cannot share the forward with another method's row groups; "
                "give that method passes=sequential"
            )
        score = self._state["score"]
        rows = [probe.rows[layer][:, -1] for layer in score]
        num_docs = self._state["batch_bias"].shape[1]
        index = document_index(batch.item_token_spans, batch.input_ids.shape[1])
        attention = document_attention(rows, index, num_docs).cpu()
        valid = torch.tensor([[e > s for s, e in spans] for spans in batch.item_token_spans], dtype=torch.bool)
        bias = self._state["batch_bias"]
        calibration = Calibration(attention, bias, calibrated_relevance(attention, bias), valid)
        calibration.alpha = calibration_weights(calibration.relevance, self.temperature, valid)
        self.last_calibration = calibration
        probe.clear()
        self._request_edit(batch, calibration.alpha)
        for layer in cache.layers:  # forget the last prompt token: it is computed again, edited
            layer.keys, layer.values = layer.keys[..., :-1, :], layer.values[..., :-1, :]
        mask = state.attention_mask
        out = state.model(
            input_ids=state.input_ids[:, -1:],
            attention_mask=None if bool((mask == 1).all()) else mask,
            position_ids=state.position_ids[:, -1:],
            **cache_argument(cache),
            use_cache=True,
            logits_to_keep=1,
            return_dict=True,
        )
        return out.logits[:, -1].to(dtype=torch.float32)

    def finish(self, state: GenerationState) -> None:
        probe = self._state.get("probe")
        if probe is not None:
            probe.clear()


@torch.no_grad()
def estimate_bias(
    model,
    tokenizer,
    prompts: Sequence[TokenizedPrompt],
    method: FoundInTheMiddle,
    batch_size: int = 4,
    calibration: dict[str, Any] | None = None,
) -> BiasFile:
    """bias(k) per item-length bucket: the mean Attn(x_dum, k) over `prompts` (calibration prompts, never
    evaluation prompts), each with the dummy in slot k, as the exact form measures it per prompt.

    Every prompt must share one template and item count (the file is valid for those only).
    """
    if not prompts:
        raise ValueError("fim: no calibration prompts to estimate the bias from")
    templates = {template_fingerprint(p.input_ids, p.item_spans) for p in prompts}
    counts = {len(p.item_spans) for p in prompts}
    if len(templates) != 1 or len(counts) != 1:
        raise ValueError(
            f"fim: calibration prompts must share one template and item count, got {len(templates)} templates and "
            f"item counts {sorted(counts)}"
        )
    num_layers = len(attention_modules(model))
    score = resolve_layers(method.score_layers, num_layers)

    def dummy_ids(slot: int) -> list[int]:
        return tokenizer(method.dummy_text(slot), add_special_tokens=False)["input_ids"]

    slots = [dummy_ids(k + 1) for k in range(counts.copy().pop())]
    dummy_rows = []
    with probing(model) as probe:
        for start in range(0, len(prompts), batch_size):
            chunk = list(prompts[start : start + batch_size])
            result = calibrate_documents(
                model, probe, chunk, score, tokenizer.pad_token_id, [slots] * len(chunk), method.calibration_batch
            )
            dummy_rows.append(result.dummy_attention)
    return BiasFile(
        model=model_key(model),
        template=templates.pop(),
        num_items=counts.pop(),
        dummy=method.dummy_template,
        score_layers=score,
        buckets=summarize_bias(torch.cat(dummy_rows), [length_bucket(p.item_spans) for p in prompts]),
        calibration=dict(calibration or {}),
    )
