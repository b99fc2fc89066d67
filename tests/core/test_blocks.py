"""Block plans, block and window order, and reading blocks from real stores."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from chunkfit import StoreWriter, open_store
from chunkfit.config import SplitSpec, WindowSpec
from chunkfit.core.blocks import (
    block_order,
    groups,
    plan_blocks,
    prefetched,
    read_block,
    read_group,
    window_order,
)
from chunkfit.core.labels import Labeller
from chunkfit.core.windows import any_event_labels, plan_split, window_starts
from chunkfit.errors import UsageError, WindowError
from chunkfit.train.budget import bytes_per_window, chunk_for_budget, parse_bytes
from chunkfit.train.cursor import Cursor

SEGMENTS = [(0, 700), (700, 1000), (1000, 2500)]
EVENTS = np.array([5, 300, 699, 700, 1200, 1201, 2499])


@pytest.fixture
def ramp_store(store_path: Path) -> Path:
    """Sample i holds i in channel 0 and -i in channel 1, so every value names its index."""
    with StoreWriter(
        store_path, channels=["up", "down"], sample_rate=10.0, has_labels=False, append=False
    ) as w:
        i = np.arange(2500, dtype=np.float32)
        w.write(np.stack([i, -i], axis=1))
        for a, b in SEGMENTS:
            w.add_segment(a, b)
        w.add_events(EVENTS)
        w.commit()
    return store_path


ranges_strategy = st.lists(
    st.tuples(st.integers(0, 50), st.integers(0, 200)), min_size=1, max_size=4
)


def as_ranges(pairs: list[tuple[int, int]]) -> np.ndarray:
    out, at = [], 0
    for gap, length in pairs:
        out.append((at + gap, at + gap + length))
        at += gap + length
    return np.array(out, dtype=np.int64)


@given(ranges_strategy, st.integers(1, 30), st.integers(1, 5), st.integers(1, 40))
def test_blocks_cover_every_window_exactly_once(
    pairs: list[tuple[int, int]], window: int, stride: int, chunk: int
) -> None:
    ranges = as_ranges(pairs)
    blocks = plan_blocks(ranges, window, stride, chunk)
    got = sorted(b.start + k * stride for b in blocks for k in range(b.n_windows))
    expected = sorted(
        int(s) for a, b in ranges for s in window_starts(int(a), int(b), window, stride)
    )
    assert got == expected


@given(ranges_strategy, st.integers(1, 30), st.integers(1, 5), st.integers(1, 40))
def test_blocks_never_cross_a_range(
    pairs: list[tuple[int, int]], window: int, stride: int, chunk: int
) -> None:
    ranges = as_ranges(pairs)
    for b in plan_blocks(ranges, window, stride, chunk):
        assert 1 <= b.n_windows <= chunk
        assert any(a <= b.start and b.stop <= e for a, e in ranges)


def test_block_of_chunk_windows_spans_chunk_plus_window_minus_one_samples() -> None:
    blocks = plan_blocks(np.array([[0, 12]]), 4, 1, 4)
    assert [(b.start, b.n_windows, b.stop) for b in blocks] == [(0, 4, 7), (4, 4, 11), (8, 1, 12)]


def test_block_order_is_a_function_of_seed_and_epoch() -> None:
    assert block_order(50, 3, 7).tolist() == block_order(50, 3, 7).tolist()


def test_block_order_changes_between_epochs() -> None:
    assert block_order(50, 3, 7).tolist() != block_order(50, 3, 8).tolist()


def test_block_order_is_a_permutation() -> None:
    assert sorted(block_order(50, 1, 2).tolist()) == list(range(50))


def test_window_order_is_a_function_of_seed_epoch_and_block() -> None:
    assert window_order(100, 1, 2, 3).tolist() == window_order(100, 1, 2, 3).tolist()


def test_window_order_differs_between_blocks() -> None:
    assert window_order(100, 1, 2, 3).tolist() != window_order(100, 1, 2, 4).tolist()


def test_unshuffled_orders_are_the_identity() -> None:
    assert block_order(5, 1, 2, shuffle=False).tolist() == [0, 1, 2, 3, 4]


def test_cursor_round_trips_through_a_dict() -> None:
    assert Cursor.from_dict(Cursor(seed=4, epoch=2, position=9).to_dict()) == Cursor(4, 2, 9)


def epoch_windows(
    path: Path, epoch: int, window: int, stride: int, chunk: int, mix: int
) -> list[np.ndarray]:
    """Every window one epoch trains on, as read from the store, in training order."""
    with open_store(path) as store:
        split = plan_split(store.segments, WindowSpec(window, stride), SplitSpec(0.1))
        blocks = plan_blocks(split.train, window, stride, chunk)
        labeller = Labeller(store, "any-event")
        out = []
        for k, group in enumerate(groups(block_order(len(blocks), 0, epoch), mix)):
            members = [blocks[i] for i in group]
            order = window_order(sum(b.n_windows for b in members), 0, epoch, k)
            data = read_group(store, labeller, members, order)
            out.extend(data.samples[o : o + window] for o in data.offsets)
        return out


@pytest.mark.parametrize("mix", [1, 3])
def test_an_epoch_reads_every_training_window_exactly_once(ramp_store: Path, mix: int) -> None:
    starts = sorted(int(w[0, 0]) for w in epoch_windows(ramp_store, 0, 20, 3, 50, mix))
    with open_store(ramp_store) as store:
        split = plan_split(store.segments, WindowSpec(20, 3), SplitSpec(0.1))
    expected = sorted(int(s) for a, b in split.train for s in window_starts(int(a), int(b), 20, 3))
    assert starts == expected


def test_windows_read_from_groups_hold_their_samples(ramp_store: Path) -> None:
    for w in epoch_windows(ramp_store, 1, 20, 3, 50, 4):
        s = int(w[0, 0])
        assert np.array_equal(w, np.stack([np.arange(s, s + 20), -np.arange(s, s + 20)], axis=1))


def test_no_training_window_shares_a_sample_with_a_validation_window(ramp_store: Path) -> None:
    with open_store(ramp_store) as store:
        split = plan_split(store.segments, WindowSpec(20), SplitSpec(0.2))
    train = {
        s + i
        for b in plan_blocks(split.train, 20, 1, 64)
        for s in range(b.start, b.stop - 19)
        for i in range(20)
    }
    val = {
        s + i
        for b in plan_blocks(split.validation, 20, 1, 64)
        for s in range(b.start, b.stop - 19)
        for i in range(20)
    }
    assert train and val and not train & val


def test_block_labels_match_brute_force_any_event(ramp_store: Path) -> None:
    with open_store(ramp_store) as store:
        labeller = Labeller(store, "any-event")
        for block in plan_blocks(np.array(SEGMENTS), 30, 2, 100):
            data = read_block(
                store, labeller, block, window_order(block.n_windows, 5, 0, block.index)
            )
            starts = block.start + data.offsets.astype(np.int64)
            assert data.labels.tolist() == any_event_labels(starts, 30, EVENTS).tolist()


def test_a_block_is_one_contiguous_read(ramp_store: Path) -> None:
    with open_store(ramp_store) as store:
        reads: list[tuple[int, int]] = []
        original = store.read

        def counting(a: int, b: int) -> np.ndarray:
            reads.append((a, b))
            return original(a, b)

        store.read = counting  # type: ignore[method-assign]
        block = plan_blocks(np.array([[1000, 2500]]), 104, 1, 1000)[0]
        read_block(store, Labeller(store, "any-event"), block, None)
    assert reads == [(1000, 1000 + 1000 + 104 - 1)]


def test_a_group_reads_each_block_with_one_contiguous_read(ramp_store: Path) -> None:
    with open_store(ramp_store) as store:
        reads: list[tuple[int, int]] = []
        original = store.read

        def counting(a: int, b: int) -> np.ndarray:
            reads.append((a, b))
            return original(a, b)

        store.read = counting  # type: ignore[method-assign]
        blocks = plan_blocks(np.array([[0, 700], [1000, 2500]]), 20, 1, 100)
        read_group(store, Labeller(store, "any-event"), [blocks[9], blocks[0]], None)
    assert reads == [(1200, 1319), (0, 119)]


def test_group_labels_follow_their_windows(ramp_store: Path) -> None:
    with open_store(ramp_store) as store:
        blocks = plan_blocks(np.array(SEGMENTS), 30, 2, 40)
        members = [blocks[7], blocks[2], blocks[11]]
        data = read_group(store, Labeller(store, "any-event"), members, window_order(120, 3, 1, 0))
        starts = data.samples[data.offsets.astype(np.int64), 0].astype(np.int64)
    assert data.labels.tolist() == any_event_labels(starts, 30, EVENTS).tolist()


def test_groups_cut_the_block_order_into_runs_of_mix() -> None:
    assert [g.tolist() for g in groups(np.array([4, 0, 3, 1, 2]), 2)] == [[4, 0], [3, 1], [2]]


def test_a_store_without_events_cannot_use_any_event(tmp_path: Path) -> None:
    path = tmp_path / "bare.zarr"
    with StoreWriter(path, channels=["x"], sample_rate=1.0, has_labels=False, append=False) as w:
        w.write(np.zeros((100, 1), dtype=np.float32))
        w.add_segment(0, 100)
        w.commit()
    with (
        open_store(path) as store,
        pytest.raises(WindowError, match="needs event markers, but the store has none"),
    ):
        Labeller(store, "any-event")


def test_prefetch_prepares_the_next_job_while_the_caller_works() -> None:
    second_started = threading.Event()

    def first() -> int:
        return 1

    def second() -> int:
        second_started.set()
        return 2

    stream = prefetched([first, second])
    assert next(stream) == 1
    # The caller holds the first result; the second job must run without being asked for.
    assert second_started.wait(timeout=30)
    assert list(stream) == [2]


def test_prefetch_yields_results_in_job_order() -> None:
    assert list(prefetched([lambda i=i: i for i in range(6)])) == list(range(6))


@pytest.mark.parametrize(
    ("text", "expected"),
    [("1.5GB", 3 << 29), ("800MB", 800 << 20), ("2g", 2 << 30), ("4096", 4096)],
)
def test_parse_bytes_reads_units(text: str, expected: int) -> None:
    assert parse_bytes(text) == expected


def test_parse_bytes_refuses_nonsense() -> None:
    with pytest.raises(UsageError, match="memory size must look like"):
        parse_bytes("lots")


def test_memory_budget_below_what_is_in_use_is_refused() -> None:
    with pytest.raises(UsageError, match="below what the process already uses"):
        chunk_for_budget(100 << 20, 600 << 20, WindowSpec(104), 1)


def test_memory_budget_picks_the_largest_chunk_that_fits() -> None:
    per_window = bytes_per_window(WindowSpec(104), 2)
    chunk = chunk_for_budget(900 << 20, 600 << 20, WindowSpec(104), 2)
    assert chunk * per_window <= 300 << 20 < (chunk + 1) * per_window


@pytest.mark.parametrize("n_windows", [256, 300, 5])
def test_eval_dataset_gathers_each_window_in_order_in_batches_of_any_length(n_windows: int) -> None:
    """Offsets go to tf.data pre-batched; the short last batch must come out whole, and every
    block must share one element spec (else Keras retraces its train function per block)."""
    from chunkfit.core.blocks import BlockData
    from chunkfit.train.tensorflow.pipeline import eval_dataset, to_tensors

    rng = np.random.default_rng(n_windows)
    samples = np.stack([np.arange(400), -np.arange(400)], axis=1).astype(np.float32)
    offsets = rng.integers(0, 400 - 20, n_windows).astype(np.int32)
    labels = rng.integers(0, 3, n_windows).astype(np.int32)
    ds = eval_dataset(
        to_tensors(BlockData((), samples, offsets, labels)), window=20, batch_size=128, n_classes=3
    )
    assert [tuple(s.shape) for s in ds.element_spec] == [(None, 20, 2), (None, 3)]
    batches = [(x.numpy(), y.numpy()) for x, y in ds]
    assert [len(x) for x, _ in batches] == [
        min(128, n_windows - i) for i in range(0, n_windows, 128)
    ]
    x = np.concatenate([b[0] for b in batches])
    y = np.concatenate([b[1] for b in batches])
    np.testing.assert_array_equal(x, samples[offsets[:, None] + np.arange(20)])
    np.testing.assert_array_equal(y, np.eye(3, dtype=np.float32)[labels])
