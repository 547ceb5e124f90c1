"""FLOP and parameter counts of the paper shapes against the numbers worked out by hand (docs/training.md)."""

import pytest

from repo_train.modeling.accounting import config_parameter_report, training_flops_per_token
from repo_train.modeling.presets import olmo2_1b, olmo2_7b


def _by_hand(d: int, ffn: int, layers: int, vocab: int, seq_len: int, repo_layers: int, d_p: int, heads: int) -> int:
    """3 × forward; MHA, so q, k, v, o are d × d each; REPO's predictor on its layers (RePo Eq. 5-6)."""
    per_layer = 2 * (4 * d * d + 3 * d * ffn) + 2 * seq_len * d
    predictor = 2 * (2 * d * d_p + d_p * heads)
    return 3 * (layers * per_layer + 2 * d * vocab + repo_layers * predictor)


@pytest.mark.parametrize(
    ("preset", "shape", "start", "repo_parameters"),
    [
        (olmo2_1b, (2048, 8192, 16, 16), 5, 11_579_392),
        (olmo2_7b, (4096, 11008, 32, 32), 10, 92_635_136),
    ],
)
def test_paper_shapes(preset, shape, start, repo_parameters):
    d, ffn, layers, heads = shape
    seq_len = 4096
    for method, repo_layers in (("rope", 0), ("nope", 0), ("repo", layers - start)):
        expected = _by_hand(d, ffn, layers, 100352, seq_len, repo_layers, d // 8, heads)
        assert training_flops_per_token(preset(position_method=method), seq_len) == expected, method
    assert config_parameter_report(preset(position_method="repo")).position == repo_parameters
