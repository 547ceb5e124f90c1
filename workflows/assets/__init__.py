"""The tiny models the built-in runs start from, shipped as package data so an installed wheel runs them too.

Each is an HF directory (safetensors, byte tokenizer, a README saying how it was made):
`TINY_KV_BASE` (a 4-layer RoPE OLMo-2 that retrieves in contexts of up to 24 pairs;
scripts/pretrain_tiny_base.py), `TINY_KV_DIP` (that base continued so that it loses the middle of 64-pair
contexts; scripts/make_tiny_dip_base.py) and `TINY_KV_DIP_CONTINUED` (the dip base continued with RoPE, rope/,
and with REPO, repo/, on the same data; scripts/make_tiny_repo_pair.py).
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent
TINY_KV_BASE = HERE / "tiny-kv-base"
TINY_KV_DIP = HERE / "tiny-kv-dip"
TINY_KV_DIP_CONTINUED = HERE / "tiny-kv-dip-continued"
