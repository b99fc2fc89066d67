"""chunkfit.blocks: every window of the split once per epoch, in chunkfit's order, resumable."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from feedstore import WINDOW, brute_windows, feed_store, seen, tail_split

import chunkfit
from chunkfit.errors import ChunkfitError, UsageError

RAW = {"window": WINDOW, "normalize": "none", "validation": 0.2, "seed": 7}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return feed_store(tmp_path_factory.mktemp("feed") / "feed.zarr")


def _pairs(it: Iterable[tuple[Any, Any, Any]]) -> Counter[tuple[int, int]]:
    return seen((x, y) for x, y, _ in it)


@pytest.mark.parametrize(("stride", "chunk", "mix"), [(1, 100, 1), (3, 50, 2), (1, 1000, 4)])
def test_every_training_window_comes_once_per_epoch(
    store: Path, stride: int, chunk: int, mix: int
) -> None:
    it = chunkfit.blocks(store, stride=stride, chunk=chunk, mix=mix, **RAW)
    assert _pairs(it) == tail_split(0.2, stride)[0]


def test_every_validation_window_comes_once(store: Path) -> None:
    it = chunkfit.blocks(store, chunk=100, split="validation", **RAW)
    assert _pairs(it) == tail_split(0.2)[1]


def test_held_out_segments_leave_whole_segments_to_validation(store: Path) -> None:
    opts = {**RAW, "validation_segments": 1, "chunk": 100}
    train = _pairs(chunkfit.blocks(store, **opts))
    val = _pairs(chunkfit.blocks(store, split="validation", **opts))
    by_segment = [brute_windows([s]) for s in ((0, 800), (1000, 1900), (1900, 2600))]
    assert val in by_segment
    assert train + val == sum(by_segment, Counter())


def test_each_epoch_has_every_window_in_another_order(store: Path) -> None:
    parts = [(x, y) for x, y, _ in chunkfit.blocks(store, chunk=100, epochs=2, **RAW)]
    half = len(parts) // 2
    order = [x[:, 0, 0].tolist() for x, _ in parts]
    assert seen(parts[:half]) == seen(parts[half:]) == tail_split(0.2)[0]
    assert order[:half] != order[half:]


def test_windows_are_shuffled_within_a_block(store: Path) -> None:
    x, _, _ = next(iter(chunkfit.blocks(store, chunk=100, **RAW)))
    starts = x[:, 0, 0]
    assert len(starts) == 100 and (np.diff(starts) != 1).any()
    assert np.ptp(starts) == 99


def test_a_loop_resumed_from_the_state_yields_exactly_the_remaining_blocks(store: Path) -> None:
    whole = [x for x, _, _ in chunkfit.blocks(store, chunk=100, epochs=2, **RAW)]
    first = chunkfit.blocks(store, chunk=100, epochs=2, **RAW)
    taken = [next(first)[0] for _ in range(len(whole) // 2 + 3)]  # into the second epoch
    state = json.loads(json.dumps(first.get_state()))
    first.close()
    again = chunkfit.blocks(store, chunk=100, epochs=2, **RAW)
    again.set_state(state)
    rest = [x for x, _, _ in again]
    assert state["epoch"] == 1
    assert len(taken) + len(rest) == len(whole)
    assert all(np.array_equal(a, b) for a, b in zip(taken + rest, whole, strict=True))


def test_a_state_of_other_settings_is_refused(store: Path) -> None:
    state = chunkfit.blocks(store, chunk=100, **RAW).get_state()
    other = chunkfit.blocks(store, chunk=100, **{**RAW, "seed": 8})
    with pytest.raises(UsageError, match="seed"):
        other.set_state(state)


def test_int_labels_and_balanced_weights_come_per_window(store: Path) -> None:
    it = chunkfit.blocks(store, chunk=100, labels="int", class_weight="balanced", **RAW)
    x, y, w = next(it)
    weights = it.class_weight
    assert y.dtype == np.int32 and y.shape == (100,) and weights is not None
    assert np.allclose(w, np.asarray([weights[int(c)] for c in y], np.float32))


def test_validation_windows_are_not_weighted(store: Path) -> None:
    it = chunkfit.blocks(store, chunk=100, split="validation", class_weight="balanced", **RAW)
    assert next(it)[2] is None


def test_an_unknown_split_is_refused(store: Path) -> None:
    with pytest.raises(ChunkfitError, match="split must be train or validation"):
        chunkfit.blocks(store, split="test", **RAW)


def test_global_normalisation_uses_the_training_split(store: Path) -> None:
    it = chunkfit.blocks(store, chunk=100, **{**RAW, "normalize": "global"})
    train = sorted(s for s, _ in tail_split(0.2)[0])
    samples = np.unique(np.concatenate([np.arange(s, s + WINDOW) for s in train]))
    assert it.normalization["mean"][0] == pytest.approx(samples.mean(), rel=1e-6)


def test_the_state_after_an_epoch_s_last_block_is_the_next_epoch_s_start(store: Path) -> None:
    it = chunkfit.blocks(store, chunk=1000, epochs=2, **RAW)
    for _ in range(len(it) // 2):
        next(it)
    assert (it.get_state()["epoch"], it.get_state()["position"]) == (1, 0)


def test_blocks_load_no_framework(store: Path) -> None:
    code = (
        "import sys, chunkfit\n"
        f"next(iter(chunkfit.blocks({str(store)!r}, window=16, chunk=100)))\n"
        "print(sorted(m for m in ('tensorflow', 'keras', 'torch', 'grain', 'jax') "
        "if m in sys.modules))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("other", "differs"),
    [
        ({"chunk": 101}, "chunk, layout"),  # as many blocks, one window longer
        ({"shuffle": False}, "shuffle"),
        ({"validation": 0.21}, "layout"),  # as many blocks of as many windows, at other places
    ],
)
def test_a_state_of_another_chunk_shuffle_or_block_layout_is_refused(
    store: Path, other: dict[str, Any], differs: str
) -> None:
    state = chunkfit.blocks(store, **{"chunk": 100, **RAW}).get_state()
    again = chunkfit.blocks(store, **{**RAW, "chunk": 100, **other})
    with pytest.raises(UsageError, match=rf"^this state was saved by .* \({differs}: "):
        again.set_state(state)


def test_a_state_past_the_epoch_s_last_group_is_refused(store: Path) -> None:
    it = chunkfit.blocks(store, chunk=100, **RAW)
    state = {**it.get_state(), "position": len(it) + 1}
    with pytest.raises(UsageError, match=rf"group {len(it) + 1} of epoch 0, which has {len(it)} "):
        it.set_state(state)


def test_the_end_of_iteration_closes_the_store_it_opened(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    closed: list[str] = []
    close = chunkfit.Store.close

    def spy(self: chunkfit.Store) -> None:
        closed.append(str(self.path))
        close(self)

    monkeypatch.setattr(chunkfit.Store, "close", spy)
    it = chunkfit.blocks(store, chunk=1000, **RAW)
    for _ in it:
        assert closed == []
    assert closed == [str(store)]


def test_a_loop_rewound_after_the_end_reads_again(store: Path) -> None:
    it = chunkfit.blocks(store, chunk=100, **RAW)
    start = it.get_state()
    first = _pairs(it)
    it.set_state(start)
    assert _pairs(it) == first == tail_split(0.2)[0]
