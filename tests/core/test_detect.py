"""RunMerger: positive windows merged into one detection per event, streamed block by block."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scoring_support import Run, merge_runs

from chunkfit.core.detect import Detection, RunMerger, point_detections

WINDOW = 4


def stream(
    blocks: list[tuple[list[int], list[float], int]],
    stride: int = 1,
    threshold: float = 0.5,
    merge_gap: int = 0,
    min_dur: int = 0,
) -> list[Detection]:
    """Push (starts, scores, segment) blocks in order, then flush."""
    merger = RunMerger(WINDOW, stride, threshold, merge_gap=merge_gap, min_duration=min_dur)
    out: list[Detection] = []
    for starts, scores, segment in blocks:
        out += merger.push(
            np.asarray(starts, dtype=np.int64), np.asarray(scores, dtype=np.float32), segment
        )
    return out + merger.flush()


def test_positive_windows_in_a_row_are_one_detection() -> None:
    assert stream([([0, 1, 2, 3, 4], [0.1, 0.6, 0.9, 0.7, 0.2], 0)]) == [
        Detection(1, 3 + WINDOW, pytest.approx(0.9), 3, 0, 2)
    ]


def test_runs_whose_windows_overlap_are_one_detection() -> None:
    got = stream([([0, 1, 2, 3], [0.6, 0.2, 0.7, 0.8], 0)])
    assert [(d.start, d.end) for d in got] == [(0, 3 + WINDOW)]


def test_runs_whose_windows_touch_are_one_detection() -> None:
    got = stream([(list(range(6)), [0.6, 0.1, 0.1, 0.1, 0.7, 0.1], 0)])
    assert [(d.start, d.end) for d in got] == [(0, 4 + WINDOW)]


def test_runs_with_samples_between_their_windows_are_two_detections() -> None:
    got = stream([(list(range(7)), [0.6, 0.1, 0.1, 0.1, 0.1, 0.7, 0.1], 0)])
    assert [(d.start, d.end) for d in got] == [(0, WINDOW), (5, 5 + WINDOW)]


def test_runs_within_the_merge_gap_are_one_detection() -> None:
    got = stream([(list(range(7)), [0.6, 0.1, 0.1, 0.1, 0.1, 0.7, 0.1], 0)], merge_gap=1)
    assert [(d.start, d.end) for d in got] == [(0, 5 + WINDOW)]


def test_a_detection_shorter_than_the_minimum_duration_is_dropped() -> None:
    got = stream([(list(range(9)), [0.6, 0.1, 0.1, 0.1, 0.1, 0.7, 0.8, 0.1, 0.1], 0)], min_dur=5)
    assert [(d.start, d.end) for d in got] == [(5, 6 + WINDOW)]


def test_the_peak_of_a_perfect_model_is_the_marker() -> None:
    # Windows 7 .. 10 hold a marker at sample 10: they share only sample 10.
    scores = [0.9 if 7 <= s <= 10 else 0.1 for s in range(20)]
    assert [d.peak for d in stream([(list(range(20)), scores, 0)])] == [10]


def test_the_peak_stays_inside_the_peak_window_of_a_long_run() -> None:
    scores = [0.99 if s == 2 else 0.6 for s in range(20)]
    (got,) = stream([(list(range(20)), scores, 0)])
    assert (got.start, got.end, got.peak) == (0, 19 + WINDOW, 2 + WINDOW - 1)


def test_a_label_region_moves_the_peak_to_where_markers_make_windows_positive() -> None:
    # Marker within the last sample of the window: only window 10 - 3 = 7 is positive.
    scores = [0.9 if s == 7 else 0.1 for s in range(20)]
    merger = RunMerger(WINDOW, 1, 0.5, region=(3, 4))
    got = merger.push(np.arange(20), np.asarray(scores), 0) + merger.flush()
    assert [d.peak for d in got] == [10]


def test_a_run_crossing_a_block_boundary_is_one_detection() -> None:
    got = stream([([0, 1, 2], [0.1, 0.6, 0.7], 0), ([3, 4, 5], [0.9, 0.8, 0.1], 0)])
    assert got == [Detection(1, 4 + WINDOW, pytest.approx(0.9), 4, 0, 3)]


def test_a_run_spanning_three_blocks_is_one_detection() -> None:
    got = stream([([0, 1], [0.1, 0.6], 0), ([2, 3], [0.7, 0.8], 0), ([4, 5], [0.9, 0.2], 0)])
    assert [(d.start, d.end, d.peak_score) for d in got] == [(1, 4 + WINDOW, pytest.approx(0.9))]


def test_a_detection_is_returned_once_no_later_window_can_join_it() -> None:
    merger = RunMerger(WINDOW, 1, 0.5)
    assert merger.push(np.arange(4), np.array([0.1, 0.7, 0.1, 0.1]), 0) == []
    got = merger.push(np.arange(4, 6), np.array([0.1, 0.1]), 0)
    assert [(d.start, d.end) for d in got] == [(1, 1 + WINDOW)]


def test_adjacent_runs_in_two_segments_stay_two_detections() -> None:
    # The second segment's first start follows the first segment's last start exactly.
    got = stream([([0, 1, 2], [0.1, 0.6, 0.7], 0), ([3, 4], [0.8, 0.1], 1)])
    assert [(d.start, d.end, d.segment) for d in got] == [(1, 2 + WINDOW, 0), (3, 3 + WINDOW, 1)]


def test_a_gap_in_the_starts_between_blocks_ends_the_run() -> None:
    got = stream([([0, 1, 2], [0.1, 0.6, 0.7], 0), ([10, 11], [0.8, 0.1], 0)])
    assert [(d.start, d.end) for d in got] == [(1, 2 + WINDOW), (10, 10 + WINDOW)]


def test_strided_windows_one_stride_apart_are_one_run() -> None:
    got = stream([([0, 3, 6], [0.7, 0.8, 0.1], 0), ([9, 12], [0.9, 0.6], 0)], stride=3)
    assert [(d.start, d.end) for d in got] == [(0, 3 + WINDOW), (9, 12 + WINDOW)]


def test_a_score_equal_to_the_threshold_is_positive() -> None:
    assert len(stream([([0, 1], [0.5, 0.4], 0)], threshold=0.5)) == 1


def test_a_float32_score_below_the_threshold_is_negative_as_in_the_metrics() -> None:
    # float32(0.7) is 0.69999998...: below 0.7, as BinaryMetrics counts it, though it equals 0.7
    # when the threshold is rounded to float32.
    assert stream([([0, 1], [0.7, 0.1], 0)], threshold=0.7) == []


def test_the_peak_score_is_the_first_window_with_the_highest_score() -> None:
    got = stream([([0, 1, 2], [0.9, 0.6, 0.9], 0), ([3], [0.9], 0)])
    assert (got[0].peak_score, got[0].peak) == (pytest.approx(0.9), 3)


def test_a_run_still_open_after_the_last_block_is_returned_by_flush() -> None:
    merger = RunMerger(WINDOW, 1, 0.5)
    assert merger.push(np.arange(3), np.array([0.1, 0.7, 0.8]), 0) == []
    assert merger.flush() == [Detection(1, 2 + WINDOW, pytest.approx(0.8), 3, 0, 2)]


def test_point_detections_are_one_sample_each_in_the_segment_holding_them() -> None:
    got = point_detections(
        np.array([5, 120]), np.array([0.9, 0.8]), np.array([[0, 100], [100, 200]])
    )
    assert got == [
        Detection(5, 6, pytest.approx(0.9), 5, 0),
        Detection(120, 121, pytest.approx(0.8), 120, 1),
    ]


@st.composite
def segmented_blocks(draw: st.DrawFn) -> tuple[list[tuple[np.ndarray, np.ndarray, int]], int]:
    """Windows of a few segments cut into blocks at random, with scores from a coarse grid."""
    stride = draw(st.integers(1, 3))
    blocks: list[tuple[np.ndarray, np.ndarray, int]] = []
    origin = 0
    for segment in range(draw(st.integers(1, 4))):
        n = draw(st.integers(1, 40))
        origin += draw(st.sampled_from([0, 0, 7]))  # segments may touch or leave a gap
        starts = origin + stride * np.arange(n)
        scores = np.asarray(
            draw(st.lists(st.sampled_from([0.1, 0.4, 0.5, 0.6, 0.9]), min_size=n, max_size=n))
        )
        cuts = sorted(set(draw(st.lists(st.integers(1, max(n - 1, 1)), max_size=5))) - {n})
        for a, b in zip([0, *cuts], [*cuts, n], strict=True):
            blocks.append((starts[a:b], scores[a:b], segment))
        origin = int(starts[-1]) + stride
    return blocks, stride


@given(segmented_blocks(), st.integers(0, 6), st.integers(0, 9))
@settings(max_examples=300, deadline=None)
def test_streamed_detections_equal_merging_all_windows_at_once(
    case: tuple[list[tuple[np.ndarray, np.ndarray, int]], int], merge_gap: int, min_dur: int
) -> None:
    blocks, stride = case
    merger = RunMerger(WINDOW, stride, 0.5, merge_gap=merge_gap, min_duration=min_dur)
    got: list[Detection] = []
    for starts, scores, segment in blocks:
        got += merger.push(starts, scores, segment)
    got += merger.flush()
    starts, scores = np.concatenate([b[0] for b in blocks]), np.concatenate([b[1] for b in blocks])
    segments = np.concatenate([np.full(b[0].size, b[2]) for b in blocks])
    expected = merge_runs(starts, segments, scores, WINDOW, stride, 0.5, merge_gap, min_dur)
    assert [Run(d.start, d.end, d.peak_score, d.peak, d.segment, d.peak_start) for d in got] == (
        expected
    )
