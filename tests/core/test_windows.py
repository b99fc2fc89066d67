"""Window and label arithmetic against brute force."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from chunkfit.config import SplitSpec, WindowSpec, event_span
from chunkfit.core.windows import (
    IGNORED,
    any_event_labels,
    class_indices,
    count_windows,
    last_labels,
    majority_labels,
    plan_split,
    span_labels,
    split_segment,
    window_starts,
)
from chunkfit.errors import UsageError, WindowError


def brute_starts(a: int, b: int, window: int, stride: int) -> list[int]:
    starts, s = [], a
    while s + window <= b:
        starts.append(s)
        s += stride
    return starts


@given(st.integers(0, 500), st.integers(0, 300), st.integers(1, 60), st.integers(1, 20))
def test_window_starts_match_brute_force(a: int, length: int, window: int, stride: int) -> None:
    assert window_starts(a, a + length, window, stride).tolist() == brute_starts(
        a, a + length, window, stride
    )


@given(st.integers(0, 300), st.integers(1, 60), st.integers(1, 20))
def test_count_windows_matches_brute_force(length: int, window: int, stride: int) -> None:
    assert count_windows(length, window, stride) == len(brute_starts(0, length, window, stride))


@given(st.integers(0, 1000), st.integers(1, 2000), st.integers(1, 100), st.floats(0.0, 0.9))
def test_split_shares_no_sample_and_keeps_a_window_gap(
    a: int, length: int, window: int, share: float
) -> None:
    b = a + length
    (t0, t1), (v0, v1) = split_segment(a, b, window, share)
    train = brute_starts(t0, t1, window, 1)
    val = brute_starts(v0, v1, window, 1)
    train_samples = {s + i for s in train for i in range(window)}
    val_samples = {s + i for s in val for i in range(window)}
    assert not train_samples & val_samples
    if train and val:
        assert min(val) - (max(train) + window) >= window
    assert a <= t0 <= t1 <= b and a <= v0 <= v1 == b


@given(st.integers(1, 2000), st.floats(0.0, 0.9))
def test_split_holds_out_the_last_share_of_the_segment(length: int, share: float) -> None:
    _, (v0, v1) = split_segment(0, length, 10, share)
    assert v1 - v0 == round(share * length)


def test_split_worked_example() -> None:
    assert split_segment(0, 1000, 50, 0.1) == ((0, 850), (900, 1000))


def test_split_without_validation_trains_on_the_whole_segment() -> None:
    assert split_segment(0, 1000, 50, 0.0) == ((0, 1000), (1000, 1000))


def test_plan_split_keeps_windows_inside_their_segment() -> None:
    seg = np.array([[0, 500], [500, 530], [600, 1600]])
    split = plan_split(seg, WindowSpec(window=40), SplitSpec(validation=0.2))
    for (a, b), (t0, t1), (v0, v1) in zip(seg, split.train, split.validation, strict=True):
        assert a <= t0 <= t1 <= v0 <= v1 <= b


def test_window_longer_than_every_segment_is_refused() -> None:
    with pytest.raises(WindowError, match="window must be at most the longest segment"):
        plan_split(np.array([[0, 80], [100, 150]]), WindowSpec(window=104), SplitSpec(0.1))


def test_validation_too_small_for_a_window_is_refused() -> None:
    with pytest.raises(WindowError, match="holds no whole window"):
        plan_split(np.array([[0, 200]]), WindowSpec(window=50), SplitSpec(0.1))


def test_split_leaving_no_training_window_is_refused() -> None:
    with pytest.raises(WindowError, match="no training window is left"):
        plan_split(np.array([[0, 200]]), WindowSpec(window=60), SplitSpec(0.5))


sorted_events = st.lists(st.integers(0, 400), unique=True).map(sorted)


@given(sorted_events, st.lists(st.integers(0, 350), min_size=1), st.integers(1, 50))
def test_any_event_labels_match_brute_force(
    events: list[int], starts: list[int], window: int
) -> None:
    expected = [int(any(s <= e < s + window for e in events)) for s in starts]
    assert (
        any_event_labels(np.array(starts), window, np.array(events, dtype=np.int64)).tolist()
        == expected
    )


def test_any_event_worked_example() -> None:
    assert any_event_labels(np.array([0, 5]), 4, np.array([6])).tolist() == [0, 1]


@given(st.lists(st.integers(0, 3), min_size=60, max_size=200), st.integers(1, 50), st.data())
def test_last_labels_match_brute_force(
    classes: list[int], window: int, data: st.DataObject
) -> None:
    starts = data.draw(st.lists(st.integers(0, len(classes) - window), min_size=1))
    expected = [classes[s + window - 1] for s in starts]
    assert last_labels(np.array(classes), np.array(starts), window).tolist() == expected


def brute_majority(window_classes: list[int]) -> int:
    counts = Counter(window_classes)
    top = max(counts.values())
    return min(c for c, n in counts.items() if n == top)


@given(st.lists(st.integers(0, 3), min_size=60, max_size=200), st.integers(1, 50), st.data())
def test_majority_labels_match_brute_force(
    classes: list[int], window: int, data: st.DataObject
) -> None:
    starts = data.draw(st.lists(st.integers(0, len(classes) - window), min_size=1))
    expected = [brute_majority(classes[s : s + window]) for s in starts]
    assert majority_labels(np.array(classes), np.array(starts), window, 4).tolist() == expected


def test_majority_tie_goes_to_the_smallest_class() -> None:
    assert majority_labels(np.array([0, 1, 1, 0, 2]), np.array([0, 2]), 3, 3).tolist() == [1, 0]


def test_class_indices_map_values_to_positions() -> None:
    assert class_indices(np.array([7, -1, 3, 7]), [-1, 3, 7]).tolist() == [2, 0, 1, 2]


def test_class_indices_refuse_an_unknown_value() -> None:
    with pytest.raises(WindowError, match="label value 5 is not one of"):
        class_indices(np.array([3, 5]), [3, 7])


# -- whole segments held out -----------------------------------------------------------------------


@st.composite
def segment_layouts(draw: st.DrawFn) -> tuple[np.ndarray, int, float, int]:
    """(segments [S, 2], window, count or share of segments to hold out, seed); at least 2 hold a
    window."""
    window = draw(st.integers(1, 40))
    lengths = draw(st.lists(st.integers(0, 200), min_size=2, max_size=12))
    lengths[:2] = [max(n, window) for n in lengths[:2]]
    bounds = np.cumsum([0, *lengths])
    usable = sum(n >= window for n in lengths)
    count = draw(st.one_of(st.integers(1, usable - 1), st.floats(0.01, (usable - 1) / usable)))
    return np.stack([bounds[:-1], bounds[1:]], axis=1), window, count, draw(st.integers(0, 2**31))


@given(segment_layouts())
def test_held_out_segments_are_whole_and_absent_from_training(
    layout: tuple[np.ndarray, int, float, int],
) -> None:
    segments, window, count, seed = layout
    split = plan_split(segments, WindowSpec(window), SplitSpec(segments=count), seed=seed)
    assert split.held is not None
    assert split.validation.tolist() == segments[list(split.held)].tolist()
    assert sorted(split.train.tolist() + split.validation.tolist()) == segments.tolist()
    assert not set(map(tuple, split.train.tolist())) & set(map(tuple, split.validation.tolist()))
    assert split.train_windows() > 0 and split.validation_windows() > 0


@given(segment_layouts())
def test_held_out_segments_are_the_asked_number_and_a_pure_function_of_the_seed(
    layout: tuple[np.ndarray, int, float, int],
) -> None:
    segments, window, count, seed = layout
    first = plan_split(segments, WindowSpec(window), SplitSpec(segments=count), seed=seed)
    again = plan_split(segments, WindowSpec(window), SplitSpec(segments=count), seed=seed)
    usable = int(((segments[:, 1] - segments[:, 0]) >= window).sum())
    assert first.held == again.held
    assert len(first.held or ()) == (int(count) if count >= 1 else max(1, round(count * usable)))


def test_other_seeds_hold_out_other_segments() -> None:
    segments = np.array([[i * 100, (i + 1) * 100] for i in range(10)])
    chosen = {
        plan_split(segments, WindowSpec(10), SplitSpec(segments=3), seed=s).held for s in range(8)
    }
    assert len(chosen) > 1


def test_holding_out_every_segment_with_a_window_is_refused() -> None:
    segments = np.array([[0, 100], [100, 105], [105, 205]])
    with pytest.raises(
        WindowError, match=r"--validation-segments 2 leaves no segment to train on: 2 segment\(s\)"
    ):
        plan_split(segments, WindowSpec(10), SplitSpec(segments=2))


@pytest.mark.parametrize("count", [0, -1, 1.5, 1.0001, True])
def test_validation_segments_that_are_neither_a_count_nor_a_share_are_refused(count: float) -> None:
    with pytest.raises(
        UsageError, match="--validation-segments must be a whole number of segments"
    ):
        SplitSpec(segments=count)


# -- label spans and margins -----------------------------------------------------------------------


def brute_span_label(start: int, events: list[int], span: tuple[int, int], margin: int) -> int:
    a, b = span
    offsets = [e - start for e in events]
    if any(a + margin <= o < b - margin for o in offsets):
        return 1
    near = any(a - margin <= o < a + margin or b - margin <= o < b + margin for o in offsets)
    return -1 if margin and near else 0


@given(
    st.lists(st.integers(0, 300), max_size=40),
    st.lists(st.integers(0, 330), max_size=8),
    st.integers(1, 40),
    st.data(),
)
def test_span_labels_match_brute_force(
    starts: list[int], events: list[int], window: int, data: st.DataObject
) -> None:
    a = data.draw(st.integers(0, window - 1))
    b = data.draw(st.integers(a + 1, window))
    margin = data.draw(st.integers(0, 10))
    ev = sorted(events)
    got = span_labels(np.array(starts, dtype=np.int64), np.array(ev), (a, b), margin)
    assert got.tolist() == [brute_span_label(s, ev, (a, b), margin) for s in starts]


def test_span_labels_worked_example() -> None:
    got = span_labels(np.array([0, 10, 20]), np.array([13, 29]), (0, 10), 2)
    assert got.tolist() == [0, 1, IGNORED]


def test_a_marker_just_before_the_window_start_leaves_the_window_out() -> None:
    assert span_labels(np.array([10]), np.array([9]), (0, 10), 2).tolist() == [IGNORED]


@given(st.lists(st.integers(0, 300), max_size=40), st.lists(st.integers(0, 330), max_size=8))
def test_span_labels_without_a_margin_are_any_event_labels(
    starts: list[int], events: list[int]
) -> None:
    s, ev = np.array(starts, dtype=np.int64), np.array(sorted(events), dtype=np.int64)
    assert span_labels(s, ev, (0, 16), 0).tolist() == any_event_labels(s, 16, ev).tolist()


@pytest.mark.parametrize(
    ("rule", "span"),
    [("any-event", (0, 100)), ("event-last=20", (80, 100)), ("event-in=10:30", (10, 30))],
)
def test_event_rules_name_the_offsets_a_marker_makes_positive(
    rule: str, span: tuple[int, int]
) -> None:
    assert event_span(rule, 100) == span


def test_per_sample_rules_have_no_event_span() -> None:
    assert event_span("majority", 100) is None


@pytest.mark.parametrize(
    "rule", ["event-last=0", "event-last=101", "event-in=30:10", "event-in=5:"]
)
def test_event_rules_outside_the_window_are_refused(rule: str) -> None:
    with pytest.raises(UsageError, match="--label"):
        WindowSpec(100, label=rule)


def test_a_margin_leaving_no_positive_offset_is_refused() -> None:
    with pytest.raises(UsageError, match="--label-margin 10 leaves no sample"):
        WindowSpec(100, label="event-last=20", margin=10)


def test_a_margin_on_per_sample_labels_is_refused() -> None:
    with pytest.raises(UsageError, match="--label-margin applies to event markers"):
        WindowSpec(100, label="last", margin=3)
