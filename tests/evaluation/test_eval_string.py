"""STRING against an independent re-implementation of the authors' code, its off switch, its two rules, refusals.

The reference below is written from HKUNLP/STRING at commit 216cc2f04cee147e8c3cfaa15723b182ecbe321e,
`string_for_llama.py`, in plain eager torch with no project code on its path: a Llama forward of its own
over the model's weights, RoPE tables `attention_factor · cos/sin` (their `RotaryEmbedding._set_cos_sin_cache`),
queries rotated at `position_ids` and at `position_ids - diag_size + local_window`, and

- the whole sequence (`string_flash_forward`): a window pass (flash `window_size=[S, 0]`: keys i-S..i), a
  shifted pass of the last L - S queries over the first L - S keys (causal), merged by their sigmoid-of-LSE
  weights;
- a decoding step over their cache (the `has_kv_cache` branch): the last S cached keys with the normal query,
  the rest with the shifted one, merged the same way.

Each pass is computed as flash-attention defines it (softmax, and its log-sum-exp), then merged as they merge.
"""

from __future__ import annotations

import math

import pytest
import torch
from method_helpers import gqa_llama

from evaluation.generation import DecodeSettings, generate, generate_batch
from evaluation.methods import MethodStack, build_method
from evaluation.methods.decoding import TokenizedPrompt, collate
from evaluation.model_loading import byte_tokenizer
from repo_train.modeling import layer_policies
from repo_train.modeling.string_policy import AUTHORS_ATTENTION_FACTOR, StringPolicy

S, W = 12, 3  # shifted_offset, small_local_value: sequences of 40 tokens shift most keys
SPEC = f"string:shifted_offset={S},small_local_value={W}"

pytestmark = pytest.mark.usefixtures("one_thread")


# ---- the reference: the authors' rule, from their code -------------------------------------------------------


def rotate_half(x):
    return torch.cat((-x[..., x.shape[-1] // 2 :], x[..., : x.shape[-1] // 2]), dim=-1)


def tables(config, length: int, factor: float):
    """Their `_set_cos_sin_cache`: emb = cat(freqs, freqs); cos/sin times attention_factor."""
    dim = config.hidden_size // config.num_attention_heads
    inv_freq = 1.0 / (config.rope_parameters["rope_theta"] ** (torch.arange(0, dim, 2).float() / dim))
    emb = torch.outer(torch.arange(length).float(), inv_freq).repeat(1, 2)
    return factor * emb.cos(), factor * emb.sin()


def rotate(x, cos, sin, positions):
    """Their `apply_rotary_pos_emb`: x [B, H, n, D], positions [n] (negative indices wrap, as in their code)."""
    return x * cos[positions] + rotate_half(x) * sin[positions]


def attention_with_lse(q, k, v, allowed):
    """One flash-attention pass: output and log-sum-exp over the allowed keys (q [H, n, D], k/v [H, m, D])."""
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~allowed, -math.inf)
    return scores.softmax(-1) @ v, scores.logsumexp(-1)


def merge(out1, lse1, out2, lse2):
    """Their merge: out1 · 1/(1 + e^(lse2 - lse1)) + out2 · 1/(1 + e^(lse1 - lse2))."""
    gap21 = (1 / (1 + torch.exp(lse2 - lse1)))[..., None]
    gap12 = (1 / (1 + torch.exp(lse1 - lse2)))[..., None]
    return out1 * gap21 + out2 * gap12


def prefill_attention(q1, q2, k, v, diag):
    """`string_flash_forward` for one sequence: q/k/v [H, L, D] (k, v already repeated to H heads)."""
    length = q1.shape[1]
    i, j = torch.arange(length)[:, None], torch.arange(length)[None, :]
    diag_out, diag_lse = attention_with_lse(q1, k, v, (j <= i) & (j >= i - diag))  # window_size=[diag, 0]
    tail = length - diag
    if tail <= 0:
        return diag_out
    a, b = torch.arange(tail)[:, None], torch.arange(tail)[None, :]
    shifted_out, shifted_lse = attention_with_lse(q2[:, -tail:], k[:, :tail], v[:, :tail], b <= a)  # causal
    merged = merge(diag_out[:, diag:], diag_lse[:, diag:], shifted_out, shifted_lse)
    return torch.cat([diag_out[:, :diag], merged], dim=1)


def decode_attention(q1, q2, key_cache, value_cache, diag):
    """Their flash-decoding branch: q [H, 1, D]; the cache [H, T, D] already holds the new token."""
    total = key_cache.shape[1]
    shifted = total - diag
    everything = torch.ones(1, diag, dtype=torch.bool)
    out1, lse1 = attention_with_lse(q1, key_cache[:, shifted:], value_cache[:, shifted:], everything)
    rest = torch.ones(1, shifted, dtype=torch.bool)
    out2, lse2 = attention_with_lse(q2, key_cache[:, :shifted], value_cache[:, :shifted], rest)
    return merge(out1, lse1, out2, lse2)


class ReferenceString:
    """Their patched Llama forward over a HF Llama's weights, one unpadded sequence, with their KV cache."""

    def __init__(self, model, diag: int, local: int, factor: float = AUTHORS_ATTENTION_FACTOR):
        self.model, self.diag, self.local = model, diag, local
        self.cos, self.sin = tables(model.config, 4096, factor)
        self.cache: list[tuple[torch.Tensor, torch.Tensor]] = []

    def layer_attention(self, index, attn, x, positions):
        config = self.model.config
        heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
        dim = config.hidden_size // heads
        n = x.shape[0]
        q = attn.q_proj(x).view(n, heads, dim).transpose(0, 1)
        k = attn.k_proj(x).view(n, kv_heads, dim).transpose(0, 1)
        v = attn.v_proj(x).view(n, kv_heads, dim).transpose(0, 1)
        k = rotate(k, self.cos, self.sin, positions)
        if index < len(self.cache):  # a decoding step: append to the cache
            k = torch.cat([self.cache[index][0], k], dim=1)
            v = torch.cat([self.cache[index][1], v], dim=1)
            self.cache[index] = (k, v)
        else:
            self.cache.append((k, v))
        k, v = k.repeat_interleave(heads // kv_heads, 0), v.repeat_interleave(heads // kv_heads, 0)
        q1 = rotate(q, self.cos, self.sin, positions)
        q2 = rotate(q, self.cos, self.sin, positions - self.diag + self.local)
        if n == k.shape[1]:
            out = prefill_attention(q1, q2, k, v, self.diag)
        else:
            out = decode_attention(q1, q2, k, v, self.diag)
        return attn.o_proj(out.transpose(0, 1).reshape(n, heads * dim))

    @torch.no_grad()
    def forward(self, ids: list[int], start: int) -> torch.Tensor:
        """Logits [n, V] of tokens `ids` at positions start..start+n-1 (start > 0: over the cache)."""
        body = self.model.model
        x = body.embed_tokens(torch.tensor(ids))
        positions = torch.arange(start, start + len(ids))
        for index, layer in enumerate(body.layers):
            x = x + self.layer_attention(index, layer.self_attn, layer.input_layernorm(x), positions)
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        return self.model.lm_head(body.norm(x)).float()

    def greedy(self, prompt: list[int], steps: int) -> tuple[list[int], list[torch.Tensor]]:
        """Their generation: prefill, then one token a step over the cache; the log-softmax of every step."""
        self.cache = []
        logits = self.forward(prompt, 0)[-1]
        chosen, logprobs = [], []
        for step in range(steps):
            logprobs.append(logits.log_softmax(-1))
            chosen.append(int(logits.argmax()))
            logits = self.forward([chosen[-1]], len(prompt) + step)[-1]
        return chosen, logprobs


# ---- the model under test -------------------------------------------------------------------------------------


@pytest.fixture
def llama(spread):
    torch.manual_seed(0)
    tokenizer = byte_tokenizer()
    return spread(gqa_llama(tokenizer, num_hidden_layers=2)), tokenizer


def prompt_ids(length: int, seed: int = 0) -> list[int]:
    return torch.randint(3, 200, (length,), generator=torch.Generator().manual_seed(seed)).tolist()


def token_logprobs(logits: torch.Tensor, ids: list[int]) -> torch.Tensor:
    """log p(token t+1 | tokens <= t) of every next token: [n - 1]."""
    return logits.float().log_softmax(-1)[:-1].gather(-1, torch.tensor(ids[1:])[:, None])[:, 0]


def test_full_sequence_loglik_equals_the_authors_rule(llama):
    model, tokenizer = llama
    ids = prompt_ids(40)
    reference = token_logprobs(ReferenceString(model, S, W).forward(ids, 0), ids)
    with MethodStack.parse(SPEC).attached(model, tokenizer), torch.no_grad():
        ours = token_logprobs(model(torch.tensor([ids])).logits[0], ids)
        assert all(isinstance(p, StringPolicy) for p in layer_policies(model))
    with torch.no_grad():
        untouched = token_logprobs(model(torch.tensor([ids])).logits[0], ids)
    assert (ours - reference).abs().max() < 1e-4  # nats per token, float32
    assert (untouched - reference).abs().max() > 1e-2  # the rule changes the answer: the test can fail


@pytest.mark.parametrize("factor", [AUTHORS_ATTENTION_FACTOR, 1.0])
def test_cached_greedy_continuation_equals_the_authors_decoding(llama, factor):
    model, tokenizer = llama
    ids, steps = prompt_ids(30, seed=1), 14  # decoding steps reach distances S and beyond
    want_tokens, want_logprobs = ReferenceString(model, S, W, factor).greedy(ids, steps)
    batch = collate([TokenizedPrompt(ids, [])], tokenizer.pad_token_id)
    seen: list[torch.Tensor] = []
    tap = build_method("baseline")
    tap.process_logits = lambda step, logits, state: seen.append(logits[0].log_softmax(-1)) or logits
    stack = MethodStack([*MethodStack.parse(f"{SPEC},attention_factor={factor!r}").methods, tap])
    with stack.attached(model, tokenizer):
        settings = DecodeSettings(max_new_tokens=steps, batch_size=1)
        [output] = generate_batch(model, tokenizer, batch, settings, stack)
    got_tokens = output.token_ids
    assert len(got_tokens) >= 8 and got_tokens == want_tokens[: len(got_tokens)]  # (the harness stops at EOS)
    for step, (got, want) in enumerate(zip(seen, want_logprobs)):
        chosen = want_tokens[step]
        assert abs(float(got[chosen] - want[chosen])) < 1e-4, f"step {step}"


def test_prefill_and_decode_rules_differ_by_the_key_at_distance_s(llama):
    """The last token scored in one forward (the key S back counted in both passes) vs as a decoding step
    (that key only in the shifted pass): different numbers, each equal to the authors' own path."""
    model, tokenizer = llama
    ids = prompt_ids(30, seed=2)
    reference = ReferenceString(model, S, W)
    whole = reference.forward(ids, 0)[-1]
    reference.cache = []
    reference.forward(ids[:-1], 0)
    stepped = reference.forward(ids[-1:], len(ids) - 1)[-1]
    with MethodStack.parse(SPEC).attached(model, tokenizer), torch.no_grad():
        ours_whole = model(torch.tensor([ids])).logits[0, -1]
        out = model(torch.tensor([ids[:-1]]), use_cache=True)
        ours_stepped = model(torch.tensor([ids[-1:]]), past_key_values=out.past_key_values).logits[0, -1]
    assert (ours_whole - whole).abs().max() < 1e-4 * whole.abs().max()
    assert (ours_stepped - stepped).abs().max() < 1e-4 * stepped.abs().max()
    assert (whole - stepped).abs().max() > 1e-3 * whole.abs().max()


def test_padded_rows_equal_each_row_alone(llama):
    model, tokenizer = llama
    prompts = [prompt_ids(34, seed=3), prompt_ids(21, seed=4)]
    settings = DecodeSettings(max_new_tokens=8, batch_size=2)
    with MethodStack.parse(SPEC).attached(model, tokenizer) as stack:
        together = generate_batch(
            model,
            tokenizer,
            collate([TokenizedPrompt(p, []) for p in prompts], tokenizer.pad_token_id),
            settings,
            stack,
        )
        alone = [
            generate_batch(model, tokenizer, collate([TokenizedPrompt(p, [])], tokenizer.pad_token_id), settings, stack)
            for p in prompts
        ]
    assert [o.token_ids for o in together] == [a[0].token_ids for a in alone]


def test_the_off_switch_is_the_untouched_model_exactly(llama):
    model, tokenizer = llama
    ids = torch.tensor([prompt_ids(40)])
    with torch.no_grad():
        before = model(ids).logits
    with MethodStack.parse("string:shifted_offset=0").attached(model, tokenizer), torch.no_grad():
        off = model(ids).logits
    assert torch.equal(off, before)


def test_an_offset_beyond_the_sequence_only_scales_the_logits(llama):
    """S >= L shifts nothing; what remains is their attention factor (a = 1 then gives RoPE itself)."""
    model, tokenizer = llama
    ids = prompt_ids(40)
    with torch.no_grad():
        before = model(torch.tensor([ids])).logits[0]
    off = MethodStack.parse(f"string:shifted_offset=40,small_local_value={W},attention_factor=1.0")
    with off.attached(model, tokenizer), torch.no_grad():
        same = model(torch.tensor([ids])).logits[0]
    assert (same - before).abs().max() < 1e-5 * before.abs().max()
    reference = ReferenceString(model, 40, W).forward(ids, 0)  # the authors' factor, no shift
    factor_only = MethodStack.parse(f"string:shifted_offset=40,small_local_value={W}")
    with factor_only.attached(model, tokenizer), torch.no_grad():
        scaled = model(torch.tensor([ids])).logits[0]
    assert (scaled - reference).abs().max() < 1e-5 * reference.abs().max()


def test_the_default_offset_is_a_third_of_max_position_embeddings():
    tokenizer = byte_tokenizer()
    model = gqa_llama(tokenizer, max_position_embeddings=1024)
    with MethodStack.parse("string").attached(model, tokenizer):
        assert {(p.shifted_offset, p.small_local_value) for p in layer_policies(model)} == {(337, 128)}


@pytest.mark.parametrize(
    "spec, message",
    [
        ("string:shifted_offset=10,small_local_value=10", "must be < shifted_offset"),
        ("string:shifted_offset=-1", "integer >= 0"),
        ("string:small_local_value=-2", "integer >= 0"),
        ("string:attention_factor=0", "finite number > 0"),
    ],
)
def test_refuses_what_is_not_the_method(spec, message):
    with pytest.raises(ValueError, match=message) as err:
        MethodStack.parse(spec)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    "spec, message",
    [
        ("pi:scale=2+string:shifted_offset=12,small_local_value=3", "uses the 'scaled_rope' policy"),
        ("string:shifted_offset=12,small_local_value=3+pi:scale=2", "uses the 'string' policy"),
        ("string:shifted_offset=12,small_local_value=3+ms_poe:start_layer=0", "uses the 'string' policy"),
        ("fim+string:shifted_offset=12,small_local_value=3", "attention probe"),
        ("string:small_local_value=200", "the default for this model"),  # S = 84 here
    ],
)
def test_refuses_stacks_that_mean_nothing_in_one_line(llama, spec, message):
    model, tokenizer = llama
    with pytest.raises(ValueError, match=message) as err, MethodStack.parse(spec).attached(model, tokenizer):
        pass
    assert "\n" not in str(err.value)


def test_caliope_then_string_runs_and_differs_from_string_alone(llama):
    """CALIOPE's remapped positions rotate queries and keys; near or far stays by token index, as their windows."""
    model, tokenizer = llama
    prompt = "Doc A: the key is blue and the door is green.\nDoc B: the key is red.\nQuestion: which key?"
    spans = [[[0, 45], [46, 68]]]
    settings = DecodeSettings(max_new_tokens=4, batch_size=1)
    answers = {}
    for spec in (SPEC, f"caliope:calibrator=hourglass+{SPEC}"):
        tap_logits: list[torch.Tensor] = []
        tap = build_method("baseline")
        tap.process_logits = lambda step, logits, state, seen=tap_logits: seen.append(logits) or logits
        stack = MethodStack([*MethodStack.parse(spec).methods, tap])
        with stack.attached(model, tokenizer):
            generate(model, tokenizer, [prompt], settings, stack, spans)
        answers[spec] = tap_logits[0]
    first, second = answers.values()
    assert not torch.allclose(first, second, atol=1e-3)


@pytest.mark.slow  # SmolLM2 on the CPU, ~1 min
def test_smollm2_agrees_with_the_authors_rule(real_model_dir):
    """SmolLM2-135M (GQA 9/3 heads, 30 layers, float32): a 300-token sequence with S = 96, W = 32 (most keys
    shifted), full-sequence log-likelihoods and 8 cached greedy steps against the reference."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(real_model_dir, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(real_model_dir)
    text = " ".join(f"Document {i}: the value of key {i * 7 % 13} is {i * 31 % 97}." for i in range(30))
    ids = tokenizer(text)["input_ids"][:300]
    reference = ReferenceString(model, 96, 32)
    want = token_logprobs(reference.forward(ids, 0), ids)
    want_tokens, want_steps = reference.greedy(ids, 8)
    with MethodStack.parse("string:shifted_offset=96,small_local_value=32").attached(model, tokenizer):
        with torch.no_grad():
            got = token_logprobs(model(torch.tensor([ids])).logits[0], ids)
        seen: list[torch.Tensor] = []
        tap = build_method("baseline")
        tap.process_logits = lambda step, logits, state: seen.append(logits[0].log_softmax(-1)) or logits
        settings = DecodeSettings(max_new_tokens=8, batch_size=1)
        stack = MethodStack([*MethodStack.parse("string:shifted_offset=96,small_local_value=32").methods, tap])
    with stack.attached(model, tokenizer):
        [output] = generate_batch(model, tokenizer, collate([TokenizedPrompt(ids, [])], 0), settings, stack)
    gap = float((got - want).abs().max())
    step_gap = max(abs(float(s[t] - w[t])) for s, w, t in zip(seen, want_steps, output.token_ids))
    print(f"SmolLM2 STRING vs the authors' rule: full sequence {gap:.2e} nats/token, cached steps {step_gap:.2e}")
    assert gap < 1e-4 and step_gap < 1e-4
    assert output.token_ids == want_tokens[: len(output.token_ids)]
