"""Balanced epochs: what an epoch trains under --oversample and --label-margin, read from real
stores, against the documented rule (every window not left out once, the rarest class k times)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from chunkfit import StoreWriter, open_store
from chunkfit.config import FitOptions
from chunkfit.core.balance import Balance, oversample_repeat
from chunkfit.core.blocks import epoch_indices, read_group, window_order
from chunkfit.core.labels import IGNORED, Labeller, class_counts, event_truth
from chunkfit.core.metrics import BinaryMetrics
from chunkfit.core.plan import SplitPlan, TrainPlan
from chunkfit.core.windows import window_starts

WINDOW = 20
EVENTS = np.array([50, 51, 300, 710, 1333, 2300])
SEGMENTS = [(0, 700), (700, 1000), (1000, 2500)]


@pytest.fixture
def ramp_store(store_path: Path) -> Path:
    """Sample i holds i, so a window's first value names its start; six rare events."""
    with StoreWriter(
        store_path, channels=["up"], sample_rate=10.0, has_labels=False, append=False
    ) as w:
        w.write(np.arange(2500, dtype=np.float32)[:, None])
        for a, b in SEGMENTS:
            w.add_segment(a, b)
        w.add_events(EVENTS)
        w.commit()
    return store_path


def plan_of(path: Path, oversample: float, margin: int = 0, mix: int = 2) -> TrainPlan:
    opts = FitOptions.from_keywords(
        window=WINDOW,
        label_margin=margin,
        chunk=150,
        mix=mix,
        batch_size=16,
        oversample=oversample,
        validation=0.2,
    )
    store = open_store(path)
    return SplitPlan.of(store, opts).blocks(opts, 150)


def brute_label(start: int, margin: int) -> int:
    """The class of the window starting at ``start``, by the documented rule."""
    offsets = EVENTS - start
    if any(margin <= o < WINDOW - margin for o in offsets):
        return 1
    if margin and any(
        -margin <= o < margin or WINDOW - margin <= o < WINDOW + margin for o in offsets
    ):
        return IGNORED
    return 0


def epoch_starts(plan: TrainPlan, path: Path, epoch: int) -> list[int]:
    """The start of every window epoch ``epoch`` trains, in training order, as the loop reads."""
    out: list[int] = []
    with open_store(path) as store:
        for k, group in enumerate(plan.train_groups(epoch)):
            order = window_order(plan.group_windows(group), plan.seed, epoch, k)
            data = read_group(
                store, plan.labeller, group, order, plan.balance.repeat, plan.balance.rare
            )
            out.extend(int(data.samples[o, 0]) for o in data.offsets)
    return out


def test_oversample_repeat_worked_example() -> None:
    assert oversample_repeat(np.array([9_900, 100]), 0.25) == 33


def test_oversample_off_repeats_nothing() -> None:
    assert oversample_repeat(np.array([9_900, 100]), 0.0) == 1


def test_a_class_already_above_the_share_is_not_repeated() -> None:
    assert oversample_repeat(np.array([600, 400]), 0.25) == 1


def test_epoch_indices_worked_example() -> None:
    got = epoch_indices(np.array([0, 1, -1, 0, 1]), 3, 1)
    assert got.tolist() == [0, 1, 3, 4, 1, 4, 1, 4]


@given(st.lists(st.integers(-1, 2), max_size=60), st.integers(1, 6), st.integers(0, 2))
def test_epoch_indices_hold_every_kept_window_once_and_the_rare_ones_repeat_times(
    labels: list[int], repeat: int, rare: int
) -> None:
    got = Counter(epoch_indices(np.array(labels, dtype=np.int32), repeat, rare).tolist())
    expected = {i: (repeat if c == rare else 1) for i, c in enumerate(labels) if c != IGNORED}
    assert dict(got) == expected


def test_an_oversampled_epoch_trains_every_negative_once_and_every_positive_k_times(
    ramp_store: Path,
) -> None:
    plan = plan_of(ramp_store, 0.25)
    k = plan.balance.repeat
    trained = Counter(epoch_starts(plan, ramp_store, 1))
    expected = {
        int(s): (k if brute_label(int(s), 0) == 1 else 1)
        for a, b in plan.split.train
        for s in window_starts(int(a), int(b), WINDOW)
    }
    assert (k > 1, dict(trained)) == (True, expected)


def test_an_oversampled_epoch_holds_the_rarest_class_at_about_the_share_asked(
    ramp_store: Path,
) -> None:
    plan = plan_of(ramp_store, 0.25)
    counts = plan.balance.epoch_counts()
    assert counts[1] / sum(counts) == pytest.approx(0.25, abs=0.02)


def test_windows_within_the_margin_of_a_marker_are_left_out_of_an_epoch(
    ramp_store: Path,
) -> None:
    plan = plan_of(ramp_store, 0.0, margin=3)
    trained = sorted(epoch_starts(plan, ramp_store, 0))
    expected = sorted(
        int(s)
        for a, b in plan.split.train
        for s in window_starts(int(a), int(b), WINDOW)
        if brute_label(int(s), 3) != IGNORED
    )
    assert trained == expected


def test_the_plan_counts_the_windows_each_group_reads(ramp_store: Path) -> None:
    plan = plan_of(ramp_store, 0.3, margin=2)
    got = [len(c) for c in _group_reads(plan, ramp_store)]
    assert got == [plan.group_windows(g) for g in plan.train_groups(0)]


def test_the_plan_epoch_is_the_balance_epoch(ramp_store: Path) -> None:
    plan = plan_of(ramp_store, 0.3, margin=2)
    assert (
        plan.epoch_windows()
        == plan.balance.epoch_windows()
        == len(epoch_starts(plan, ramp_store, 0))
    )


def test_an_oversampled_epoch_reads_the_same_windows_in_the_same_order_twice(
    ramp_store: Path,
) -> None:
    plan = plan_of(ramp_store, 0.25, margin=2)
    assert epoch_starts(plan, ramp_store, 1) == epoch_starts(plan, ramp_store, 1)


def test_left_out_windows_are_counted_apart_from_every_class(ramp_store: Path) -> None:
    with open_store(ramp_store) as store:
        counts = class_counts(
            Labeller(store, "any-event", 3), np.array([[0, 700]]), WINDOW, 1, ignored=True
        )
    labels = [brute_label(s, 3) for s in range(0, 700 - WINDOW + 1)]
    assert counts.tolist() == [labels.count(0), labels.count(1), labels.count(IGNORED)]


def test_balance_records_the_repeat_and_the_share_it_reaches() -> None:
    got = Balance.of(np.array([900, 100, 7]), 0.5).to_dict([0, 1])
    assert got == {
        "oversample": 0.5,
        "class": 1,
        "repeat": 9,
        "ignored_windows": 7,
        "epoch_windows": 1800,
        "epoch_share": 0.5,
    }


def test_window_figures_skip_windows_the_margin_leaves_out() -> None:
    m = BinaryMetrics()
    m.update(event_truth(np.array([1, IGNORED, 0, IGNORED]), 1), np.array([0.9, 0.8, 0.1, 0.2]))
    assert (m.n, int(m.pos_hist.sum()), int(m.neg_hist.sum())) == (2, 1, 1)


def _group_reads(plan: TrainPlan, path: Path) -> list[np.ndarray]:
    with open_store(path) as store:
        return [
            read_group(
                store, plan.labeller, g, None, plan.balance.repeat, plan.balance.rare
            ).offsets
            for g in plan.train_groups(0)
        ]
