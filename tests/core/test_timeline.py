"""Timeline: seconds that respect segments, and UTC times where the store knows them."""

from __future__ import annotations

import numpy as np
import pytest

from chunkfit.core.timeline import Timeline
from chunkfit.store.segtimes import SegmentTime, parse_utc

SEGMENTS = np.array([[0, 100], [100, 200]])
NOON = parse_utc("2024-05-01T12:00:00Z")


def utc(seconds: float) -> SegmentTime:
    return SegmentTime(utc_us=NOON + round(seconds * 1e6))


def test_a_gap_between_dated_segments_counts_as_elapsed_time() -> None:
    line = Timeline(SEGMENTS, 100.0, [utc(0), utc(10)])
    assert line.seconds(150, 1) == pytest.approx(10.5)


def test_a_sample_of_a_dated_segment_has_its_utc_time() -> None:
    line = Timeline(SEGMENTS, 100.0, [utc(0), utc(10)])
    assert line.utc(150, 1) == "2024-05-01T12:00:10.500000Z"


def test_segments_without_times_are_placed_end_to_end() -> None:
    line = Timeline(SEGMENTS, 100.0, [None, None])
    assert (line.seconds(150, 1), line.utc(150, 1), line.has_utc) == (
        pytest.approx(1.5),
        None,
        False,
    )


def test_the_end_of_a_span_is_timed_in_the_segment_it_closes() -> None:
    line = Timeline(SEGMENTS, 100.0, [utc(0), utc(10)])
    assert (line.segment_of(100), line.seconds(100, 0)) == (1, pytest.approx(1.0))


def test_times_of_one_sources_clock_count_the_gap_between_its_segments() -> None:
    clock = [SegmentTime(seconds=5.0, source=0), SegmentTime(seconds=65.0, source=0)]
    assert Timeline(SEGMENTS, 100.0, clock).seconds(100, 1) == pytest.approx(60.0)


def test_times_of_two_sources_clocks_are_not_compared() -> None:
    clock = [SegmentTime(seconds=5.0, source=0), SegmentTime(seconds=65.0, source=1)]
    assert Timeline(SEGMENTS, 100.0, clock).seconds(100, 1) == pytest.approx(1.0)


def test_a_utc_time_and_a_source_clock_are_not_compared() -> None:
    times = [utc(0), SegmentTime(seconds=65.0, source=1)]
    assert Timeline(SEGMENTS, 100.0, times).seconds(100, 1) == pytest.approx(1.0)


def test_a_segment_dated_before_the_previous_one_ends_follows_it() -> None:
    line = Timeline(SEGMENTS, 100.0, [utc(0), utc(0.5)])
    assert line.seconds(100, 1) == pytest.approx(1.0)


def test_a_store_without_a_rate_has_no_seconds_nor_utc() -> None:
    line = Timeline(SEGMENTS, None, [utc(0), utc(10)])
    assert (line.seconds(150, 1), line.utc(150, 1)) == (None, None)
