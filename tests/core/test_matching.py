"""Event matching (chunkfit.core.matching) against a brute force over every one-to-one pairing."""

from __future__ import annotations

import itertools
import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkfit.core.matching import match_events

samples = st.lists(st.integers(0, 60), max_size=5)


def _most_pairs(allowed: list[list[bool]]) -> int:
    """The largest number of (marker, detection) pairs, each used once, over every pairing."""
    n_markers = len(allowed)
    n_det = len(allowed[0]) if allowed else 0
    for k in range(min(n_markers, n_det), 0, -1):
        for ms in itertools.combinations(range(n_markers), k):
            for ds in itertools.permutations(range(n_det), k):
                if all(allowed[m][d] for m, d in zip(ms, ds, strict=True)):
                    return k
    return 0


@settings(max_examples=300, deadline=None)
@given(markers=samples, peaks=samples, tolerance=st.integers(0, 12))
def test_peak_matching_finds_as_many_pairs_as_the_best_pairing(
    markers: list[int], peaks: list[int], tolerance: int
) -> None:
    match = match_events(np.array(markers), np.array(peaks), tolerance)
    ms = sorted(markers)
    allowed = [[abs(p - m) <= tolerance for p in peaks] for m in ms]
    assert match.found == _most_pairs(allowed)


@settings(max_examples=300, deadline=None)
@given(
    markers=samples,
    spans=st.lists(st.tuples(st.integers(0, 60), st.integers(0, 20)), max_size=5),
    tolerance=st.integers(0, 6),
)
def test_span_matching_finds_as_many_pairs_as_the_best_pairing(
    markers: list[int], spans: list[tuple[int, int]], tolerance: int
) -> None:
    lo = np.array([a for a, _ in spans], dtype=np.int64)
    hi = lo + np.array([n for _, n in spans], dtype=np.int64)
    peaks = (lo + hi) // 2
    match = match_events(np.array(markers), peaks, tolerance, lo=lo, hi=hi)
    ms = sorted(markers)
    allowed = [
        [a - tolerance <= m <= b + tolerance for a, b in zip(lo, hi, strict=True)] for m in ms
    ]
    assert match.found == _most_pairs(allowed)


@settings(max_examples=300, deadline=None)
@given(markers=samples, peaks=samples, tolerance=st.integers(0, 12))
def test_each_pair_is_within_tolerance_and_uses_a_marker_and_a_detection_once(
    markers: list[int], peaks: list[int], tolerance: int
) -> None:
    match = match_events(np.array(markers), np.array(peaks), tolerance)
    ms, ds = match.pairs[:, 0], match.pairs[:, 1]
    assert np.unique(ms).size == ms.size and np.unique(ds).size == ds.size
    assert np.all(np.abs(match.errors) <= tolerance)
    assert np.array_equal(match.errors, np.array(peaks)[ds] - np.sort(markers)[ms])


def test_one_detection_spanning_every_marker_finds_one() -> None:
    match = match_events(
        np.array([10, 50, 90]), np.array([50]), 5, lo=np.array([0]), hi=np.array([100])
    )
    assert (match.found, match.missed, match.false_alarms) == (1, 2, 0)


def test_summary_of_the_docstring_example() -> None:
    match = match_events(np.array([100, 200]), np.array([105, 150]), 10)
    s = match.summary(rate=10.0, hours=0.5)
    assert (s["found"], s["missed"], s["false_alarms"]) == (1, 1, 1)
    assert (s["precision"], s["recall"], s["f1"]) == (0.5, 0.5, 0.5)
    assert s["false_alarms_per_hour"] == 2.0
    assert s["time_error_median_s"] == 0.5


def test_no_markers_and_no_detections_give_no_ratio() -> None:
    match = match_events(np.zeros(0), np.zeros(0), 3)
    assert [math.isnan(v) for v in (match.precision, match.recall, match.f1)] == [True] * 3
