"""A loop fed by chunkfit.blocks and ``chunkfit train`` see the same windows, standardised and
weighted alike: the windows train reads are recorded from its own loop during one short run."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from feedstore import WINDOW, feed_store, seen

import chunkfit
from chunkfit.core.blocks import BlockData
from chunkfit.core.plan import TrainPlan
from chunkfit.feed.source import normalized, window_rows
from chunkfit.train.normalize import Normalizer

SETTINGS = {
    "window": WINDOW,
    "chunk": 100,
    "mix": 2,
    "seed": 7,
    "validation": 0.2,
    "class_weight": "balanced",
}


def _starts(data: BlockData) -> Counter[tuple[int, int]]:
    """(start in the store, class index) of every window of a group train read."""
    spans = [b.stop - b.start for b in data.blocks]
    bases = np.cumsum([0, *spans[:-1]])
    which = np.searchsorted(bases, data.offsets, side="right") - 1
    firsts = np.asarray([b.start for b in data.blocks])[which] + data.offsets - bases[which]
    return Counter(zip(firsts.tolist(), data.labels.tolist(), strict=True))


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """One epoch of ``chunkfit.fit`` with every group its loop reads recorded."""
    root = tmp_path_factory.mktemp("agree")
    store = feed_store(root / "feed.zarr")
    read: dict[tuple[Any, ...], BlockData] = {}
    original = TrainPlan.read

    def spy(plan: TrainPlan, store_: Any, group: Any, epoch: Any, k: int, *a: Any) -> BlockData:
        data = original(plan, store_, group, epoch, k, *a)
        read[(epoch, tuple(b.index for b in group))] = data
        return data

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(TrainPlan, "read", spy)
        chunkfit.fit(
            "baseline-cnn", store, **SETTINGS, batch_size=32, epochs=1, jit="off", out=root / "run"
        )
    yield {"store": store, "read": read, "run": json.loads((root / "run/run.json").read_text())}


def _train_windows(read: dict[tuple[Any, ...], BlockData], training: bool) -> Counter[Any]:
    out: Counter[tuple[int, int]] = Counter()
    for (epoch, _), data in read.items():
        if (epoch is not None) == training:
            out += _starts(data)
    return out


def test_train_and_blocks_see_the_same_training_windows(trained: dict[str, Any]) -> None:
    it = chunkfit.blocks(trained["store"], **SETTINGS, normalize="none")
    assert seen((x, y) for x, y, _ in it) == _train_windows(trained["read"], True)


def test_train_and_blocks_see_the_same_validation_windows(trained: dict[str, Any]) -> None:
    it = chunkfit.blocks(trained["store"], **SETTINGS, split="validation", normalize="none")
    assert seen((x, y) for x, y, _ in it) == _train_windows(trained["read"], False)


def test_blocks_come_in_the_order_train_read_them(trained: dict[str, Any]) -> None:
    it = chunkfit.blocks(trained["store"], **SETTINGS, normalize="none")
    ours = [x[:, 0, 0].astype(int).tolist() for x, _, _ in it]
    theirs = [[s for s, _ in sorted(_starts(d))] for (e, _), d in trained["read"].items() if e == 0]
    assert [sorted(o) for o in ours] == theirs


def test_normalisation_statistics_are_train_s(trained: dict[str, Any]) -> None:
    it = chunkfit.blocks(trained["store"], **SETTINGS)
    assert it.normalization == trained["run"]["normalization"]


def test_class_weights_are_train_s(trained: dict[str, Any]) -> None:
    it = chunkfit.blocks(trained["store"], **SETTINGS)
    weights = trained["run"]["class_weight"]["weights"]
    assert it.class_weight == {i: weights[str(c)] for i, c in enumerate(it.classes)}


@pytest.mark.parametrize("mode", ["global", "window"])
def test_windows_are_standardised_as_train_s_step_does(trained: dict[str, Any], mode: str) -> None:
    stats = trained["run"]["normalization"]
    norm = Normalizer(mode, tuple(stats["mean"]), tuple(stats["std"]))
    data = next(iter(trained["read"].values()))
    raw = window_rows(data.samples, data.offsets, WINDOW)
    expected = np.asarray(norm.apply(raw))
    assert np.allclose(normalized(raw, norm), expected, rtol=1e-5, atol=1e-5)
