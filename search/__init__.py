"""LPES: Bézier-constrained genetic search of per-layer RoPE scaling factors (issue 6; not built yet)."""
