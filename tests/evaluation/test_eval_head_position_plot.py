"""The positions-per-head figure."""

from __future__ import annotations

import pytest
from repo_positions_fixture import synthetic_positions

from evaluation.head_position_plot import plot_head_positions


def test_plot_head_positions(tmp_path):
    path = tmp_path / "positions.png"
    fig = plot_head_positions(synthetic_positions(), title="layer 3", path=path)
    assert path.stat().st_size > 0 and len([ax for ax in fig.axes if ax.get_visible()]) == 3
    with pytest.raises(ValueError, match=r"heads \[5\] are not in 0..2"):
        plot_head_positions(synthetic_positions(), heads=[5])
    detailed = plot_head_positions(synthetic_positions(), detail_tokens=8)  # a second row, on each head's own scale
    visible = [ax for ax in detailed.axes if ax.get_visible()]
    assert len(visible) == 6 and all(len(ax.lines[0].get_xdata()) == 8 for ax in visible[3:])
