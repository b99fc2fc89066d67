"""The real logs shipped in data/: they read back as documented, and damage is detected."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import chunkfit

DATA = Path(__file__).resolve().parents[2] / "data"


def _mitdb100():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("mitdb100", DATA / "mitdb100.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_mitdb100_reads_as_physionet_describes_record_100() -> None:
    m = _mitdb100()
    samples, events, rate, names = m.load()
    assert samples.shape == (650_000, 2) and samples.dtype == np.int16 and rate == 360.0
    assert names == ["MLII", "V5"]
    assert samples[:3].tolist() == [[995, 1011], [995, 1011], [995, 1011]]
    codes = [c for _, c in m.read_annotations(DATA / "mitdb100" / "100.atr")]
    assert {c: codes.count(c) for c in set(codes)} == {"N": 2239, "A": 33, "V": 1, "+": 1}
    assert events.size == 34 and np.all(np.diff(events) > 0) and events[-1] < 650_000
    assert m.load("V")[1].size == 1


def test_mitdb100_refuses_a_signal_file_that_disagrees_with_its_header_checksums(
    tmp_path: Path,
) -> None:
    m = _mitdb100()
    folder = tmp_path / "mitdb100"
    shutil.copytree(DATA / "mitdb100", folder)
    raw = bytearray((folder / "100.dat").read_bytes())
    raw[300_000] ^= 0x01  # one bit of one sample
    (folder / "100.dat").write_bytes(bytes(raw))
    with pytest.raises(
        ValueError,
        match=r"100.dat channel (MLII|V5): checksum -?\d+ and first sample \d+, the header says",
    ):
        m.load(folder=folder)


def test_mitdb100_becomes_a_store_with_its_premature_beats_as_events(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, str(DATA / "mitdb100.py"), str(tmp_path)], check=True, capture_output=True
    )
    store = tmp_path / "m.zarr"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "chunkfit",
            "ingest",
            str(store),
            str(tmp_path / "mitdb100.npy"),
            "--rate",
            "360",
            "--names",
            "MLII,V5",
            "--events",
            str(tmp_path / "mitdb100_events.txt"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    with chunkfit.open_store(store) as s:
        assert (s.n_samples, s.channels, s.sample_rate) == (650_000, ["MLII", "V5"], 360.0)
        assert s.events.size == 34
        np.testing.assert_array_equal(
            s.read(0, 650_000), np.load(tmp_path / "mitdb100.npy").astype(np.float32)
        )
