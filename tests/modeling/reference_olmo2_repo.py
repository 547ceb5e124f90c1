"""An independent, from-the-equations forward pass of OLMo-2 with REPO layers.

Written for the tests only, without calling any of repo_train's code: plain
tensor algebra on the state dict, eager softmax attention with an explicit
causal mask, RoPE written as rotations of the pairs (j, j + D/2) by angle
position · θ_j, and REPO's predictor from the paper:

    r_i = SiLU(h_i W_g) ⊙ (h_i W_c),   z_i^(h) = r_i w_z^(h)
"""

import math

import torch
import torch.nn.functional as F


def rms_norm(x, weight, eps):
    return weight * (x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rotate_pairs(x, positions, theta):
    """x [B, H, S, D]; positions [B, H or 1, S]; dims j and j+D/2 form a pair rotated by pos·θ_j."""
    half = x.shape[-1] // 2
    inv_freq = theta ** (-torch.arange(half, dtype=torch.float64) * 2 / x.shape[-1])
    angle = positions.double()[..., None] * inv_freq  # [B, P, S, half]
    a, b = x[..., :half].double(), x[..., half:].double()
    cos, sin = angle.cos(), angle.sin()
    return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1).to(x.dtype)


def forward_logits(state, config, input_ids, policies, linear_mix=0.0, return_positions=False):
    """Logits of `input_ids [B, S]`; `policies[l]` in {"rope", "nope", "repo"}."""
    d, n_heads = config.hidden_size, config.num_attention_heads
    head_dim = d // n_heads
    eps = config.rms_norm_eps
    theta = config.rope_parameters["rope_theta"]
    bsz, seq = input_ids.shape
    linear = torch.arange(seq, dtype=torch.float64)[None, None, :].expand(bsz, 1, seq)
    causal = torch.full((seq, seq), float("-inf")).triu(1)
    h = state["model.embed_tokens.weight"][input_ids]
    used = []
    for layer, policy in enumerate(policies):
        p = f"model.layers.{layer}."
        q = rms_norm(h @ state[p + "self_attn.q_proj.weight"].T, state[p + "self_attn.q_norm.weight"], eps)
        k = rms_norm(h @ state[p + "self_attn.k_proj.weight"].T, state[p + "self_attn.k_norm.weight"], eps)
        v = h @ state[p + "self_attn.v_proj.weight"].T
        q, k, v = (t.view(bsz, seq, n_heads, head_dim).transpose(1, 2) for t in (q, k, v))
        if policy == "rope":
            pos = linear
        elif policy == "repo":
            gate = h @ state[p + "self_attn.gate_map.weight"].T
            content = h @ state[p + "self_attn.content_map.weight"].T
            r = F.silu(gate) * content
            z = (r @ state[p + "self_attn.final_map.weight"].T).transpose(1, 2)  # [B, H, S]
            pos = (1 - linear_mix) * z.double() + linear_mix * linear
        else:
            pos = None
        used.append(pos)
        if pos is not None:
            q, k = rotate_pairs(q, pos, theta), rotate_pairs(k, pos, theta)
        scores = q @ k.transpose(-1, -2) / math.sqrt(head_dim) + causal
        attn = torch.softmax(scores, dim=-1) @ v
        attn = attn.transpose(1, 2).reshape(bsz, seq, d) @ state[p + "self_attn.o_proj.weight"].T
        h = h + rms_norm(attn, state[p + "post_attention_layernorm.weight"], eps)
        gate = h @ state[p + "mlp.gate_proj.weight"].T
        up = h @ state[p + "mlp.up_proj.weight"].T
        mlp = (F.silu(gate) * up) @ state[p + "mlp.down_proj.weight"].T
        h = h + rms_norm(mlp, state[p + "post_feedforward_layernorm.weight"], eps)
    h = rms_norm(h, state["model.norm.weight"], eps)
    logits = h @ state["lm_head.weight"].T
    return (logits, used) if return_positions else logits
