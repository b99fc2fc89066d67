"""The classic detector of each field, run beside chunkfit by ``benchmarks/quality.py``.

- ECG R peaks: Pan-Tompkins (1985) as neurokit2 implements it (``ecg_clean`` then ``ecg_peaks``
  with ``method="pantompkins1985"``), on lead MLII in millivolts, over the whole record;
- seismic onsets: ObsPy's classic STA/LTA (``classic_sta_lta`` + ``trigger_onset``), on the record
  band-passed as its markers were, with the short and long windows and the trigger-on and -off
  levels chosen by a grid search for the best event F1 on the training range.

Both need the ``quality`` extra (``pip install -e '.[quality]'``); they are imported only here, so
the rest of the benchmark runs without them.
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import numpy as np

from chunkfit.core.matching import match_events

DATA = Path(__file__).resolve().parents[1] / "data"
HINT = "the classic detectors need the quality extra: pip install -e '.[quality]'"

# The STA/LTA grid: short window (s), long window (s), trigger on, trigger off.
STA_S = (0.5, 1.0, 2.0)
LTA_S = (10.0, 20.0, 30.0)
ON = (3.0, 4.0, 5.0, 6.0)
OFF = (0.5, 1.0, 1.5)


def available() -> str | None:
    """None when both packages import, else why not (with the install hint)."""
    for name in ("neurokit2", "obspy"):
        try:
            __import__(name)
        except ImportError as err:
            return f"{err}; {HINT}"
    return None


def pan_tompkins(mlii_mv: np.ndarray, rate: float) -> tuple[np.ndarray, str]:
    """R-peak sample indices found by neurokit2's Pan-Tompkins, and what was run."""
    import neurokit2 as nk

    cleaned = nk.ecg_clean(mlii_mv, sampling_rate=int(rate), method="pantompkins1985")
    _, info = nk.ecg_peaks(
        cleaned, sampling_rate=int(rate), method="pantompkins1985", correct_artifacts=False
    )
    return np.asarray(info["ECG_R_Peaks"], dtype=np.int64), f"neurokit2 {nk.__version__}"


def sta_lta_tuned(
    counts: np.ndarray,
    markers: np.ndarray,
    train: tuple[int, int],
    tolerance: int,
) -> tuple[np.ndarray, str]:
    """Onsets of the STA/LTA settings with the best event F1 on ``train`` (ties: fewer
    detections), over the whole record, and the settings chosen."""
    sys.path.insert(0, str(DATA))
    import kw1  # data/kw1.py: the band and the onset function its markers were made with

    filtered = kw1.band_passed(counts)
    a, b = train
    truth = markers[(markers >= a) & (markers < b)]
    best: tuple[float, int, np.ndarray, str] | None = None
    for sta, lta, on, off in itertools.product(STA_S, LTA_S, ON, OFF):
        if off >= on:
            continue
        onsets = kw1.sta_lta_onsets(filtered, sta, lta, on, off)
        inside = onsets[(onsets >= a) & (onsets < b)]
        f1 = match_events(truth, inside, tolerance).f1
        key = (f1, -inside.size)
        if best is None or key > (best[0], best[1]):
            label = f"sta {sta:g} s, lta {lta:g} s, on {on:g}, off {off:g}"
            best = (f1, -inside.size, onsets, label)
    assert best is not None
    import obspy

    return best[2], f"obspy {obspy.__version__}, tuned on training: {best[3]}"
