"""PositionalHidden against an independent re-implementation of the authors' attention rule.

The reference below is written from the authors' repository, github.com/PositionalHidden/PositionalHidden at
commit f3bcd5560c2b080233e9f12ae60b8c42880faf97: `LlamaAttention._init_hidden_states_scale` and
`LlamaAttention.forward` of positional_hidden/models/modeling_llama_hidden_scale.py (a forward of several
tokens: every row untouched, then the last `last_recompute_tokens` rows recomputed from the scaled input, the
scaled keys and values cached; a decoding step: q/k (and v with change_value) from the scaled input), and the
teacher-forced scoring of experiments/search_dimension/eval_on_valid_set.py (last_recompute_tokens = the
answer's length + 1). It is a whole Llama in plain torch (embedding, RMSNorm, RoPE, grouped-query attention,
SwiGLU), sharing only the weights with the HF model the method runs on.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from float_checks import assert_close_to_scale
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

from evaluation.generation import collate
from evaluation.methods import MethodStack
from evaluation.methods.base import build_method
from evaluation.methods.decoding import TokenizedPrompt, score_continuations
from repo_train.modeling.cache_keyword import cache_argument

pytestmark = pytest.mark.usefixtures("one_thread")

AUTHORS_CONFIG = Path(__file__).parents[1] / "fixtures" / "positional_hidden" / "config_llama2_7b.json"
#: 1e-4 nats per token, the agreement the method promises in float32.
NATS = 1e-4


def tiny_llama(seed: int = 0) -> LlamaForCausalLM:
    """4 layers, grouped-query attention (4 query heads, 2 key/value heads), weights spread for clear argmaxes."""
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=50,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        pad_token_id=0,
        eos_token_id=1,
    )
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() == 2:
                param.mul_(4.0)
    return model


# ---- the reference, from the authors' code -------------------------------------------------------------


def _rms(x, weight, eps):
    return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def _rotate(x, positions, theta):
    dim = x.shape[-1]
    inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    freqs = torch.outer(positions.float(), inv_freq)
    emb = torch.cat([freqs, freqs], dim=-1)
    half = dim // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * emb.cos() + rotated * emb.sin()


def _attend(q, k, v, query_positions, key_positions):
    """softmax(q k^T / sqrt(d) + causal mask) v, keys repeated per query group (the authors' repeat_kv)."""
    groups = q.shape[0] // k.shape[0]  # [heads, S, head_dim]
    k, v = k.repeat_interleave(groups, dim=0), v.repeat_interleave(groups, dim=0)
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(key_positions[None, :] > query_positions[:, None], float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


class Reference:
    """The authors' rule on the weights of `model` (batch of one row); `cache[l] = (keys, values)` rotated."""

    def __init__(self, model, setting: dict):
        self.model, self.s = model, setting
        c = model.config
        self.heads, self.kv_heads, self.hd = (
            c.num_attention_heads,
            c.num_key_value_heads,
            c.hidden_size // c.num_attention_heads,
        )
        self.theta = c.rope_parameters["rope_theta"] if getattr(c, "rope_parameters", None) else c.rope_theta
        self.cache: list = [None] * c.num_hidden_layers

    def _split(self, x, heads):
        return x.view(x.shape[0], heads, self.hd).transpose(0, 1)  # [heads, S, hd]

    def _layer(self, index, attn, h, positions, decoding):
        s = self.s
        scaled = h.clone()
        if index in s["layers"]:
            scaled[s["skip_first"] :, s["dims"]] *= s["factor"]
        proj = lambda lin, x, heads: self._split(lin(x), heads)
        if decoding:  # q_len == 1 with a cache: the token is computed from the scaled input
            q = _rotate(proj(attn.q_proj, scaled, self.heads), positions, self.theta)
            k = _rotate(proj(attn.k_proj, scaled, self.kv_heads), positions, self.theta)
            v = proj(attn.v_proj, scaled if s["change_value"] else h, self.kv_heads)
            past_k, past_v = self.cache[index]
            self.cache[index] = (torch.cat([past_k, k], dim=1), torch.cat([past_v, v], dim=1))
            keys, values = self.cache[index]
            out = _attend(q, keys, values, positions, torch.arange(keys.shape[1]))
            return out.transpose(0, 1).reshape(h.shape[0], -1)
        q = _rotate(proj(attn.q_proj, h, self.heads), positions, self.theta)
        k = _rotate(proj(attn.k_proj, h, self.kv_heads), positions, self.theta)
        v = proj(attn.v_proj, h, self.kv_heads)
        out = _attend(q, k, v, positions, positions)
        last = s["last_recompute_tokens"]
        q_s = _rotate(proj(attn.q_proj, scaled[-last:], self.heads), positions[-last:], self.theta)
        k_s = _rotate(proj(attn.k_proj, scaled, self.kv_heads), positions, self.theta)
        v_s = proj(attn.v_proj, scaled, self.kv_heads) if s["change_value"] else v
        self.cache[index] = (k_s, v_s)
        out[:, -last:] = _attend(q_s, k_s, v_s, positions[-last:], positions)
        return out.transpose(0, 1).reshape(h.shape[0], -1)

    @torch.no_grad()
    def logits(self, ids: list[int], decoding: bool = False) -> torch.Tensor:
        m = self.model.model
        past = 0 if not decoding else self.cache[0][0].shape[1]
        positions = torch.arange(past, past + len(ids))
        x = m.embed_tokens.weight[torch.tensor(ids)]
        for index, layer in enumerate(m.layers):
            eps = layer.input_layernorm.variance_epsilon
            h = _rms(x, layer.input_layernorm.weight, eps)
            x = x + layer.self_attn.o_proj(self._layer(index, layer.self_attn, h, positions, decoding))
            h = _rms(x, layer.post_attention_layernorm.weight, eps)
            x = x + layer.mlp.down_proj(torch.nn.functional.silu(layer.mlp.gate_proj(h)) * layer.mlp.up_proj(h))
        return self.model.lm_head(_rms(x, m.norm.weight, m.norm.variance_epsilon))

    def greedy(self, prompt: list[int], steps: int) -> tuple[list[int], list[torch.Tensor]]:
        logits = [self.logits(prompt)[-1]]
        tokens = [int(logits[-1].argmax())]
        for _ in range(steps - 1):
            logits.append(self.logits([tokens[-1]], decoding=True)[-1])
            tokens.append(int(logits[-1].argmax()))
        return tokens, logits


# ---- the method ---------------------------------------------------------------------------------------

SETTING = {
    "dims": [3, 17],
    "layers": [1, 2],
    "factor": 0.0,
    "skip_first": 0,
    "last_recompute_tokens": 1,
    "change_value": False,
}
PROMPT = [5, 9, 13, 22, 7, 31, 2, 44, 18, 27, 11, 36]


def spec_of(setting: dict) -> str:
    lists = {k: ";".join(map(str, v)) or "none" for k, v in setting.items() if isinstance(v, list)}
    scalars = {k: str(v).lower() for k, v in setting.items() if not isinstance(v, list)}
    return "positional_hidden:" + ",".join(f"{k}={v}" for k, v in {**lists, **scalars}.items())


def token_logprobs(logits: torch.Tensor, ids: list[int]) -> torch.Tensor:
    """log p(ids[i+1] | ids[:i+1]) from full-sequence logits `[S, V]`."""
    logprobs = torch.log_softmax(logits.double(), dim=-1)
    return logprobs[torch.arange(len(ids) - 1), torch.tensor(ids[1:])]


@torch.no_grad()
def our_greedy(model, prompt: list[int], steps: int) -> tuple[list[int], list[torch.Tensor]]:
    cache = DynamicCache(config=model.config)
    out = model(input_ids=torch.tensor([prompt]), use_cache=True, **cache_argument(cache))
    logits = [out.logits[0, -1]]
    tokens = [int(logits[-1].argmax())]
    for step in range(steps - 1):
        position = torch.tensor([[len(prompt) + step]])
        out = model(
            input_ids=torch.tensor([[tokens[-1]]]), position_ids=position, use_cache=True, **cache_argument(cache)
        )
        logits.append(out.logits[0, -1])
        tokens.append(int(logits[-1].argmax()))
    return tokens, logits


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"last_recompute_tokens": 4},
        {"change_value": True},
        {"skip_first": 3, "last_recompute_tokens": 2},
        {"factor": -1.5, "layers": [0, 3]},
    ],
)
def test_full_sequence_loglik_equals_the_authors_rule(changes):
    setting = {**SETTING, **changes}
    model = tiny_llama()
    reference = Reference(model, setting).logits(PROMPT)
    method = build_method(spec_of(setting))
    with MethodStack([method]).attached(model, None), torch.no_grad():
        ours = model(input_ids=torch.tensor([PROMPT]), use_cache=False).logits[0]
    want, got = token_logprobs(reference, PROMPT), token_logprobs(ours, PROMPT)
    assert float((want - got).abs().max()) <= NATS
    # every row's whole next-token distribution, the last (recomputed) rows' included
    want_rows, got_rows = torch.log_softmax(reference.double(), -1), torch.log_softmax(ours.double(), -1)
    assert float((want_rows - got_rows).abs().max()) <= NATS
    with torch.no_grad():
        baseline = torch.log_softmax(model(input_ids=torch.tensor([PROMPT])).logits[0].double(), -1)
    # the rule does something: the recomputed rows differ from the untouched model by far more than the tolerance
    last = setting["last_recompute_tokens"]
    assert float((want_rows - baseline)[-last:].abs().max()) > 100 * NATS


@pytest.mark.parametrize("changes", [{}, {"change_value": True}, {"last_recompute_tokens": 3}])
def test_greedy_continuation_with_the_kv_cache_equals_the_authors_decoding(changes):
    setting = {**SETTING, **changes}
    model = tiny_llama(seed=1)
    want_tokens, want_logits = Reference(model, setting).greedy(PROMPT, steps=8)
    with MethodStack([build_method(spec_of(setting))]).attached(model, None):
        got_tokens, got_logits = our_greedy(model, PROMPT, steps=8)
    assert got_tokens == want_tokens
    for step, (want, got) in enumerate(zip(want_logits, got_logits)):
        drift = (torch.log_softmax(want.double(), -1) - torch.log_softmax(got.double(), -1)).abs().max()
        assert float(drift) <= NATS, f"step {step}"
    _, baseline = our_greedy(model, PROMPT, steps=8)
    moved = max(
        float((torch.log_softmax(a, -1) - torch.log_softmax(b, -1)).abs().max()) for a, b in zip(baseline, want_logits)
    )
    assert moved > 100 * NATS  # the method changes what this model decodes from


def test_a_cached_step_equals_recomputing_its_row_as_the_authors_rule_does():
    """The authors' cached decoding = one forward over prompt + generated tokens with the prompt's last row and
    every generated row recomputed (their validation script's rule); a chunk fed after the cache is that too."""
    model = tiny_llama(seed=2)
    method = build_method(spec_of(SETTING))
    continuation = [8, 30, 4, 19]
    with MethodStack([method]).attached(model, None), torch.no_grad():
        cache = DynamicCache(config=model.config)
        model(input_ids=torch.tensor([PROMPT]), use_cache=True, **cache_argument(cache))
        stepped = model(
            input_ids=torch.tensor([continuation]),
            use_cache=True,
            position_ids=torch.arange(len(PROMPT), len(PROMPT) + 4)[None],
            **cache_argument(cache),
        )
    rule = Reference(model, {**SETTING, "last_recompute_tokens": len(continuation) + 1})
    whole = rule.logits(PROMPT + continuation)[-len(continuation) :]
    assert_close_to_scale(stepped.logits[0], whole, 1e-5, what="chunk after the cache vs the recomputed rows")


def test_teacher_forced_score_equals_the_authors_validation_rule():
    """`score_continuations` (what `--score gold_loglik` and lm-eval's loglikelihood run) gives the answer's
    log-likelihood of one forward with last_recompute_tokens = len(answer) + 1, also when the file says 3."""
    model = tiny_llama(seed=3)
    setting = {**SETTING, "last_recompute_tokens": 3}
    answers = [[8, 30, 4], [19, 6]]
    prompts = [PROMPT, PROMPT[3:]]
    batch = collate([TokenizedPrompt(p) for p in prompts], 0, torch.device("cpu"))
    stack = MethodStack([build_method(spec_of(setting))])
    with stack.attached(model, None):
        scores = score_continuations(model, None, batch, answers, stack)
        # the file's 3 rows are back for generation afterwards
        assert [p.prefill_rows for p in stack.methods[0]._policies] == [3, 3]
    for prompt, answer, score in zip(prompts, answers, scores):
        rule = Reference(model, {**setting, "last_recompute_tokens": len(answer) + 1})
        ids = prompt + answer
        want = float(token_logprobs(rule.logits(ids), ids)[-len(answer) :].sum())
        assert abs(score.logprob_sum - want) <= NATS * len(answer)
        generating = Reference(model, setting)  # what generation's prefill (3 rows) would give: not the same
        assert abs(score.logprob_sum - float(_fed(generating, prompt, answer))) > 10 * NATS


def _fed(reference: Reference, prompt: list[int], answer: list[int]) -> float:
    """Σ log p of `answer` fed token by token after the reference's prefill of `prompt` (its last logits)."""
    logits = reference.logits(prompt)[-1]
    total = 0.0
    for token, following in zip(answer, [*answer[1:], None]):
        total += float(torch.log_softmax(logits.double(), -1)[token])
        if following is not None:
            logits = reference.logits([token], decoding=True)[-1]
    return total


@pytest.mark.parametrize("off", [{"factor": 1.0}, {"layers": []}, {"dims": []}])
def test_the_off_switches_leave_the_model_untouched_exactly(off):
    model = tiny_llama(seed=4)
    with torch.no_grad():
        want = model(input_ids=torch.tensor([PROMPT])).logits
    want_tokens, want_logits = our_greedy(model, PROMPT, steps=5)
    with MethodStack([build_method(spec_of({**SETTING, **off}))]).attached(model, None), torch.no_grad():
        got = model(input_ids=torch.tensor([PROMPT])).logits
        got_tokens, got_logits = our_greedy(model, PROMPT, steps=5)
    # no layer changes its input, so the policy hands back None and HF's own projection runs: the same kernels
    assert torch.equal(got, want)
    assert got_tokens == want_tokens and all(torch.equal(a, b) for a, b in zip(got_logits, want_logits))


def test_reads_the_authors_config_file_as_it_is(tmp_path):
    method = build_method(f"positional_hidden:config={AUTHORS_CONFIG}")
    assert method.setting.dims == (2393,) and method.chosen_layers == tuple(range(10, 26))
    assert method.setting.factor == -1.0 and method.setting.last_recompute_tokens == 1
    assert not method.setting.change_value
    extra = tmp_path / "searched.json"
    extra.write_text(json.dumps({**SETTING, "candidates": [{"dim": 3, "loss": 1.2}]}))
    inline = build_method(f"positional_hidden:config={extra},factor=0.5,layers=0-1")
    assert inline.setting.dims == (3, 17) and inline.chosen_layers == (0, 1) and inline.setting.factor == 0.5
    # the label names what was given, and reads back as the same method
    assert inline.spec() == f"positional_hidden:config={extra},layers=0-1,factor=0.5"
    assert build_method(inline.spec()) == inline


@pytest.mark.parametrize(
    "spec, message",
    [
        ("positional_hidden:factor=0", "needs dims"),
        ("positional_hidden:dims=3,factor=0", "needs layers"),
        ("positional_hidden:dims=a;b,layers=1", "not a list of integers"),
        ("positional_hidden:config=/nonexistent.json", "does not exist"),
        ("positional_hidden:dims=3,layers=1,last_recompute_tokens=0", "last_recompute_tokens >= 1"),
    ],
)
def test_bad_settings_are_one_line(spec, message):
    with pytest.raises(ValueError, match=message) as err:
        build_method(spec)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    "spec, message",
    [("dims=40,layers=1", "past the model's hidden size"), ("dims=3,layers=9", "past the model's 4 layers")],
)
def test_a_setting_for_another_model_is_refused_at_attach(spec, message):
    model = tiny_llama()
    with pytest.raises(ValueError, match=message), MethodStack.parse(f"positional_hidden:{spec}").attached(model, None):
        pass


def test_stacks_after_a_position_method_and_refuses_what_cannot_follow():
    """After PI it keeps PI's rotation in its layers (the scaled input, PI's positions); PI after it, or the
    method twice, is refused in one line (PI scales RoPE layers only; one layer takes one scaling)."""
    model = tiny_llama(seed=5)
    ids = torch.tensor([PROMPT])
    logits = {}
    for spec in ("pi:scale=2", spec_of(SETTING), "pi:scale=2+" + spec_of(SETTING)):
        with MethodStack.parse(spec).attached(model, None), torch.no_grad():
            logits[spec] = model(input_ids=ids).logits[0, -1]
    stacked = logits["pi:scale=2+" + spec_of(SETTING)]
    assert all(float((stacked - other).abs().max()) > 1e-3 for other in list(logits.values())[:2])
    for spec in (spec_of(SETTING) + "+pi:scale=2", spec_of(SETTING) + "+" + spec_of(SETTING)):
        with pytest.raises(ValueError) as refusal, MethodStack.parse(spec).attached(model, None):
            pass
        assert "\n" not in str(refusal.value)
