#!/usr/bin/env python3
"""Turn the shipped seismometer record BW.KW1 (``data/kw1/``) into a signal and event markers.

The record is 2 h 36 min of the vertical channel of station KW1 of the Bavarian network BW
(2011-03-31 00:00:00.18 UTC on, 100 Hz, raw counts), as ObsPy ships it for its tests: one integer
per line, gzipped. It holds a teleseism (about 1,900 s in) and local events (about 3,890 s and
8,690 s in). This script reads it with numpy and the standard library only, checks its hash, and
writes

- ``OUT/kw1.npy``: int32 array (936001, 1), the counts;
- ``OUT/kw1_events.txt``: the shipped markers (``kw1/markers.txt``).

The markers are STA/LTA trigger onsets computed with ObsPy, the field's reference implementation
(``--markers`` recomputes them and needs obspy, in chunkfit's ``quality`` extra): the counts less
their mean, band-passed 1-20 Hz (``Trace.filter("bandpass")``, 4 corners, causal), then
``classic_sta_lta`` with a 1 s short and a 20 s long window and ``trigger_onset`` on 4, off 1.

Usage::

    python data/kw1.py OUT [--markers]
    chunkfit ingest kw1.zarr OUT/kw1.npy --rate 100 --names EHZ --events OUT/kw1_events.txt

See ``README.md`` in this directory for provenance and licence.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent / "kw1"
RECORD = HERE / "BW.KW1._.EHZ.D.2011.090_downsampled.asc.gz"
MARKERS = HERE / "markers.txt"
SHA256 = "1ab5b46344e4d166d82113c4947cdd5aa3ca8353b128640e6b221345e475a5bc"
RATE = 100.0
START = "2011-03-31T00:00:00.180000Z"
# STA/LTA settings of the markers: band (Hz), short and long window (s), trigger on and off.
BAND = (1.0, 20.0)
STA_S, LTA_S, ON, OFF = 1.0, 20.0, 4.0, 1.0


def load() -> np.ndarray:
    """The counts, int32 (936001,), hash verified."""
    raw = RECORD.read_bytes()
    digest = hashlib.sha256(raw).hexdigest()
    if digest != SHA256:
        raise ValueError(f"{RECORD}: sha256 {digest}, expected {SHA256}")
    values = np.array(gzip.decompress(raw).split(), dtype=np.float64)
    counts = values.astype(np.int32)
    if not np.array_equal(counts, values):
        raise ValueError(f"{RECORD}: values that are not whole counts")
    return counts


def band_passed(counts: np.ndarray) -> np.ndarray:
    """The counts less their mean, band-passed as the markers were (obspy)."""
    from obspy import Trace

    trace = Trace(counts.astype(np.float64) - counts.mean(), header={"sampling_rate": RATE})
    trace.filter("bandpass", freqmin=BAND[0], freqmax=BAND[1], corners=4, zerophase=False)
    return np.asarray(trace.data)


def sta_lta_onsets(
    filtered: np.ndarray, sta_s: float, lta_s: float, on: float, off: float
) -> np.ndarray:
    """Trigger onsets (sample indices) of obspy's classic STA/LTA on a band-passed signal."""
    from obspy.signal.trigger import classic_sta_lta, trigger_onset

    cft = classic_sta_lta(filtered, int(sta_s * RATE), int(lta_s * RATE))
    onsets = trigger_onset(cft, on, off)
    return np.array([int(a) for a, _ in onsets], dtype=np.int64)


def markers() -> np.ndarray:
    """The shipped marker sample indices."""
    return np.array(MARKERS.read_text().split(), dtype=np.int64)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, nargs="?")
    ap.add_argument("--markers", action="store_true", help="Recompute kw1/markers.txt with obspy")
    args = ap.parse_args()
    counts = load()
    if args.markers:
        onsets = sta_lta_onsets(band_passed(counts), STA_S, LTA_S, ON, OFF)
        MARKERS.write_text("".join(f"{t}\n" for t in onsets.tolist()))
        print(f"{onsets.size} markers: {', '.join(f'{t / RATE:.2f} s' for t in onsets)}")
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        np.save(args.out / "kw1.npy", counts.reshape(-1, 1))
        (args.out / "kw1_events.txt").write_text(MARKERS.read_text())
        print(f"{counts.size:,} samples at {RATE:g} Hz from {START}; {markers().size} markers")


if __name__ == "__main__":
    main()
