"""The signal axis of eval.png names the channel's unit where the store knows it: recordings that
say their units (WFDB, EDF) keep them in their source records at ingest (``Store.units``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib.axes
import numpy as np
import pytest
from scoring_support import SAMPLES, Trained, sensor_signal
from support import make_store

import chunkfit
from chunkfit.config import IngestOptions

wfdb = pytest.importorskip(
    "wfdb", reason="the [wfdb] extra is not installed (make test installs it)"
)

EVENTS = list(range(100, SAMPLES - 100, 150))


@pytest.fixture(scope="module")
def in_millivolts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A one-channel WFDB record of channel ``x`` in mV (the runs' channel), with event markers."""
    folder = tmp_path_factory.mktemp("wfdb")
    signal = sensor_signal(SAMPLES, EVENTS, seed=5)
    wfdb.wrsamp(
        "rec",
        fs=100.0,
        units=["mV"],
        sig_name=["x"],
        p_signal=signal.astype(np.float64).reshape(-1, 1),
        fmt=["16"],
        write_dir=str(folder),
    )
    (folder / "events.txt").write_text("".join(f"{e}\n" for e in EVENTS))
    store = folder / "rec.zarr"
    chunkfit.ingest(
        store, [str(folder / "rec.hea")], IngestOptions(events=str(folder / "events.txt"))
    )
    return store


def _signal_labels(
    monkeypatch: pytest.MonkeyPatch, run: Path, store: Path, plot: Path
) -> list[str]:
    """The y-axis labels set while ``evaluate`` draws ``plot``, the signal axis's first."""
    labels: list[str] = []
    original = matplotlib.axes.Axes.set_ylabel

    def spy(self: Any, label: str, *args: Any, **kwargs: Any) -> Any:
        labels.append(label)
        return original(self, label, *args, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "set_ylabel", spy)
    chunkfit.evaluate(run, store, plot=plot)
    assert plot.exists()
    return labels


def test_a_recording_that_names_its_units_gives_the_store_its_channels_units(
    in_millivolts: Path,
) -> None:
    with chunkfit.open_store(in_millivolts) as s:
        assert s.units == {"x": "mV"}


def test_a_store_of_unitless_sources_knows_no_units(tmp_path: Path) -> None:
    store = make_store(tmp_path / "s.zarr", np.zeros((100, 2), np.float32))
    with chunkfit.open_store(store) as s:
        assert s.units == {}


def test_the_plots_signal_axis_names_the_unit_the_recording_gave(
    runs: Trained, in_millivolts: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    labels = _signal_labels(monkeypatch, runs.run, in_millivolts, tmp_path / "eval.png")
    assert labels[0] == "x (mV)"


def test_without_a_unit_the_plots_signal_axis_says_the_values_are_as_stored(
    runs: Trained, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    labels = _signal_labels(monkeypatch, runs.run, runs.store, tmp_path / "eval.png")
    assert labels[0] == "x (as stored)"
