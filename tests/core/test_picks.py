"""The dense picker's arithmetic: targets from markers, stitched window outputs, peaks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from support import make_store

from chunkfit.core.blocks import Block, BlockData
from chunkfit.core.picks import peak_picks, pick_targets, stitch, with_targets
from chunkfit.store import open_store


def test_target_is_a_triangle_of_width_samples_peaking_on_the_marker() -> None:
    assert pick_targets(np.array([3]), 0, 8, 3).tolist() == [0, 0, 0.5, 1, 0.5, 0, 0, 0]


def test_overlapping_targets_take_their_max() -> None:
    assert pick_targets(np.array([3, 5]), 2, 9, 3).tolist() == [0.5, 1, 0.5, 1, 0.5, 0, 0]


def test_marker_outside_the_range_reaches_into_it() -> None:
    out = pick_targets(np.array([10]), 0, 9, 5)
    np.testing.assert_array_equal(out, np.float32([0] * 8 + [1 / 3]))


def test_width_one_marks_the_marker_alone() -> None:
    assert pick_targets(np.array([1]), 0, 3, 1).tolist() == [0, 1, 0]


def test_stitch_takes_each_sample_from_the_window_it_is_most_central_in() -> None:
    outputs = np.array([[0, 1, 2, 3], [10, 11, 12, 13]], dtype=np.float32)
    assert stitch(np.array([0, 2]), outputs, 0, 6).tolist() == [0, 1, 2, 11, 12, 13]


def test_stitch_leaves_uncovered_samples_nan_and_keeps_to_the_range() -> None:
    out = stitch(np.array([2]), np.array([[5, 6]], dtype=np.float32), 1, 5)
    assert np.isnan(out[[0, 3]]).all() and out[1:3].tolist() == [5, 6]


def test_peaks_are_local_maxima_over_the_threshold_a_distance_apart() -> None:
    scores = np.array([0, 0.6, 0.2, 0.9, 0.1, 0.7, 0.7, 0])
    assert peak_picks(scores, 0.5, 2).tolist() == [1, 3, 5]


def test_a_higher_peak_suppresses_lower_ones_within_the_distance() -> None:
    scores = np.array([0, 0.6, 0.2, 0.9, 0.1, 0.7, 0.7, 0])
    assert peak_picks(scores, 0.5, 3).tolist() == [3]


def test_peaks_below_the_threshold_and_nan_do_not_count() -> None:
    assert peak_picks(np.array([0.4, 0.1, np.nan, 0.2, 0.8, 0.3]), 0.5, 1).tolist() == [4]


def test_a_rising_edge_at_the_end_is_a_peak() -> None:
    assert peak_picks(np.array([0.1, 0.5, 0.9]), 0.5, 1).tolist() == [2]


def test_blocks_carry_their_targets_as_a_last_column(tmp_path: Path) -> None:
    store = open_store(make_store(tmp_path / "s.zarr", np.ones((20, 1), np.float32), events=[5]))
    blocks = (Block(0, 2, 2, 4, 1), Block(1, 10, 1, 4, 1))  # samples [2, 7) and [10, 14)
    data = BlockData(blocks, np.ones((9, 1), np.float32), np.array([0, 1, 5]), np.zeros(3))
    out = with_targets(data, store, 3)
    assert out.samples[:, 0].tolist() == [1] * 9
    assert out.samples[:, 1].tolist() == [0, 0, 0.5, 1, 0.5, 0, 0, 0, 0]
