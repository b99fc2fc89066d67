"""What a run trains (chunkfit.core.plan): the split, its blocks and each epoch's groups, as
numbers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from support import make_store

from chunkfit import open_store
from chunkfit.config import FitOptions
from chunkfit.core.blocks import block_order
from chunkfit.core.labels import Labeller
from chunkfit.core.plan import SplitPlan, TrainPlan
from chunkfit.errors import WindowError


def _store(path: Path, events: list[int], n: int = 1000) -> Path:
    signal = np.zeros((n, 1), dtype=np.float32)
    return make_store(path, signal, segments=[(0, n // 2), (n // 2, n)], events=events)


def _opts(**keywords: object) -> FitOptions:
    settings: dict[str, object] = {"window": 10, "chunk": 100, "batch_size": 10, "mix": 2}
    return FitOptions.from_keywords(**(settings | keywords))


@pytest.fixture
def plan(tmp_path: Path) -> TrainPlan:
    """Two segments of 500 samples, window 10, validation 0.1, blocks of 100 windows, mix 2."""
    path = _store(tmp_path / "s.zarr", events=[5, 300, 470, 520, 800, 960])
    with open_store(path) as store:
        opts = _opts()
        return SplitPlan.of(store, opts).blocks(opts, opts.blocks.chunk)


def test_each_segment_trains_up_to_a_window_gap_before_its_validation_tail(
    plan: TrainPlan,
) -> None:
    assert plan.split.train.tolist() == [[0, 440], [500, 940]]
    assert plan.split.validation.tolist() == [[450, 500], [950, 1000]]


def test_training_blocks_hold_at_most_chunk_windows_and_never_cross_a_segment(
    plan: TrainPlan,
) -> None:
    # 431 windows per training range: blocks of 100, 100, 100, 100 and 31, per segment
    assert [(b.start, b.n_windows) for b in plan.train_blocks[:5]] == [
        (0, 100),
        (100, 100),
        (200, 100),
        (300, 100),
        (400, 31),
    ]
    assert plan.train_blocks[5].start == 500


def test_an_epochs_groups_follow_its_block_order_mix_at_a_time(plan: TrainPlan) -> None:
    order = block_order(len(plan.train_blocks), seed=0, epoch=1).tolist()
    groups = plan.train_groups(1)
    assert [[b.index for b in g] for g in groups] == [order[i : i + 2] for i in range(0, 10, 2)]


def test_two_epochs_visit_the_blocks_in_different_orders(plan: TrainPlan) -> None:
    first = [b.index for g in plan.train_groups(0) for b in g]
    second = [b.index for g in plan.train_groups(1) for b in g]
    assert sorted(first) == sorted(second) and first != second


def test_validation_groups_keep_store_order(plan: TrainPlan) -> None:
    assert [[b.start for b in g] for g in plan.val_groups()] == [[450, 950]]


def test_group_samples_is_the_span_of_the_mix_longest_blocks(plan: TrainPlan) -> None:
    assert plan.group_samples() == 2 * (99 + 10)


def test_windows_of_adds_up_the_named_training_blocks(plan: TrainPlan) -> None:
    assert plan.windows_of([0, 4]) == 131


def test_the_training_phase_of_an_epoch_starts_the_epochs_share_of_the_run(
    plan: TrainPlan,
) -> None:
    train, val = 862, 82  # windows: 2 x 431 training, 2 x 41 validation
    start, width = plan.share(1, 2, "train")
    assert (start, width) == pytest.approx(((train + val) / (2 * (train + val)), train / 1888))


def test_the_validation_phase_follows_the_training_phase(plan: TrainPlan) -> None:
    start, width = plan.share(0, 2, "validate")
    assert (start, width) == pytest.approx((862 / 1888, 82 / 1888))


def test_a_validation_split_without_an_event_is_refused(tmp_path: Path) -> None:
    path = _store(tmp_path / "quiet-tail.zarr", events=[5, 300, 520, 800])
    with open_store(path) as store, pytest.raises(WindowError, match="no window with an event"):
        SplitPlan.of(store, _opts())


def test_without_validation_no_event_is_needed_in_it(tmp_path: Path) -> None:
    path = _store(tmp_path / "no-val.zarr", events=[5, 300, 520, 800])
    with open_store(path) as store:
        assert SplitPlan.of(store, _opts(validation=0.0)).split.validation_windows() == 0


def test_the_plans_labeller_follows_the_label_rule(plan: TrainPlan) -> None:
    assert isinstance(plan.labeller, Labeller) and plan.labeller.classes == [0, 1]
