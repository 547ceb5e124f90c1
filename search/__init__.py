"""LPES: a Bézier-constrained genetic search of one RoPE scaling factor per layer (Wang, Ding, Lv et al.).

`python -m search run` scores candidate scale vectors with the evaluation
harness (the only fitness), and writes a versioned scale file that the
harness applies as `--methods lpes:scale_file=PATH`. See docs/methods/lpes.md.
"""
