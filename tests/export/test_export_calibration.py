"""The int8 calibration windows: the run's training split only, seeded, events among them, and the
window-number arithmetic against a brute-force listing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from support import make_store

import chunkfit
from chunkfit.config import WindowSpec
from chunkfit.export.meta import RunFacts
from chunkfit.export.quantize import representative, split_starts
from chunkfit.export.write import calibrate
from chunkfit.score.runs import RunSpec

WINDOW = 8


@given(
    lengths=st.lists(st.integers(0, 40), min_size=1, max_size=5),
    window=st.integers(1, 10),
    stride=st.integers(1, 4),
    data=st.data(),
)
def test_split_starts_numbers_windows_as_listing_them_does(
    lengths: list[int], window: int, stride: int, data: st.DataObject
) -> None:
    bounds = np.cumsum([0, *(n + 3 for n in lengths)])
    ranges = np.array([[a, a + n] for a, n in zip(bounds, lengths, strict=False)], np.int64)
    listed = [s for a, b in ranges for s in range(a, b - window + 1, stride)]
    if not listed:
        return
    picks = sorted(data.draw(st.sets(st.integers(0, len(listed) - 1), min_size=1)))
    got = split_starts(ranges, np.array(picks, np.int64), window, stride)
    assert got.tolist() == [listed[p] for p in picks]


def _meta(train: list[list[int]]) -> dict[str, Any]:
    return {
        "config": {"windows": {"label": "any-event", "margin": 0}, "blocks": {"seed": 3}},
        "split": {"train_ranges": train},
    }


def _store(tmp_path: Path) -> chunkfit.Store:
    signal = np.arange(5_000, dtype=np.float32)[:, None]  # each sample says where it came from
    path = make_store(tmp_path / "s.zarr", signal, events=[700, 2_100, 4_900])
    return chunkfit.open_store(path)


def test_calibration_windows_come_from_the_training_split_only(tmp_path: Path) -> None:
    store = _store(tmp_path)
    rep = representative(
        store, _meta([[0, 1_000], [2_000, 3_000]]), window=WINDOW, stride=2, positive=1
    )
    firsts = rep.windows[:, 0, 0].astype(np.int64)
    assert len(rep.windows) == 300
    assert all((0 <= s <= 1_000 - WINDOW) or (2_000 <= s <= 3_000 - WINDOW) for s in firsts)
    assert (firsts % 2 == 0).all()
    assert (rep.windows[:, :, 0] == firsts[:, None] + np.arange(WINDOW)).all()


def test_calibration_includes_the_rare_event_windows(tmp_path: Path) -> None:
    store = _store(tmp_path)
    rep = representative(
        store, _meta([[0, 1_000], [2_000, 3_000]]), window=WINDOW, stride=1, positive=1
    )
    firsts = rep.windows[:, 0, 0].astype(np.int64)
    with_event = [s for s in firsts if any(s <= e < s + WINDOW for e in (700, 2_100))]
    assert rep.events == len(with_event) == 16  # every event window of the split: 8 per event


def test_calibration_is_the_same_for_the_same_seed(tmp_path: Path) -> None:
    store = _store(tmp_path)
    meta = _meta([[0, 5_000]])
    a = representative(store, meta, window=WINDOW, stride=1, positive=1)
    b = representative(store, meta, window=WINDOW, stride=1, positive=1)
    assert np.array_equal(a.windows, b.windows)


def test_a_split_shorter_than_the_set_gives_every_window(tmp_path: Path) -> None:
    store = _store(tmp_path)
    rep = representative(store, _meta([[0, 50]]), window=WINDOW, stride=1, positive=1)
    assert rep.windows[:, 0, 0].tolist() == list(range(0, 50 - WINDOW + 1))


def test_a_picker_run_calibrates_on_its_event_class_not_its_output_index(tmp_path: Path) -> None:
    store = _store(tmp_path)
    meta = _meta([[0, 1_000], [2_000, 3_000]])
    spec = RunSpec("run", WindowSpec(window=WINDOW), [0, 1], ["c0"], 1, meta["config"], "", meta)
    picker = RunFacts(  # a picker's event score is index 0 of its [b, window, 1] output
        model="picker",
        trained_on="tensorflow",
        window=WINDOW,
        stride=1,
        channels=["c0"],
        n_channels=1,
        rate=None,
        classes=[0, 1],
        positive=0,
        threshold=0.5,
        label="any-event",
        output_kind="per-sample",
        run=meta,
    )
    rep = calibrate(store.path, spec, picker)
    assert rep.events == 16  # the event windows of the split, as for a window model
