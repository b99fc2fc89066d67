"""Helpers shared by the evaluate, predict and score CLI tests: small trained runs made once per
session, and brute-force versions of what the library computes block by block.

The brute-force code is written for clarity, not speed: every window of every segment is cut with
stride tricks from one ``store.read`` of the segment and scored with one ``model.predict``.
"""

from __future__ import annotations

import dataclasses
import functools
import subprocess
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from support import make_store, run_cli

import chunkfit
from chunkfit.synth import SynthSpec, balanced_anomalies, synth

WINDOW = 16
SAMPLES = 3_000
STRIDE = 3


@dataclasses.dataclass(frozen=True)
class Trained:
    """A small synthetic store (channel ``x``, 1 Hz) and two runs trained on it for one epoch."""

    store: Path
    run: Path  # window 16, stride 1
    strided: Path  # window 16, stride 3


@functools.cache
def trained(root: Path) -> Trained:
    """Train the session's runs once, under ``root`` (the session's base temporary folder).

    A cache rather than a conftest fixture so the runs are shared by every test module using them.
    """
    folder = root / "trained"
    folder.mkdir()
    store = folder / "synth.zarr"
    synth(store, SynthSpec(samples=SAMPLES, anomalies=balanced_anomalies(SAMPLES, WINDOW), seed=1))
    common = {"window": WINDOW, "chunk": 512, "batch_size": 64, "epochs": 1, "validation": 0.1}
    chunkfit.fit("baseline-cnn", store, **common, out=folder / "run")
    chunkfit.fit("baseline-cnn", store, **common, stride=STRIDE, out=folder / "strided")
    return Trained(store, folder / "run", folder / "strided")


@functools.cache
def keras_model(path: Path) -> Any:
    """The run's model loaded by Keras itself (a run folder's model.keras, or a .keras file)."""
    import keras

    return keras.saving.load_model(path / "model.keras" if path.is_dir() else path)


def sensor_signal(n: int, events: Sequence[int], seed: int) -> np.ndarray:
    """The synthetic problem's signal, float32 [n, 1]: sin(i) + noise, +0.5 at the events."""
    rng = np.random.default_rng(seed)
    x = np.sin(np.arange(n, dtype=np.float64)) + rng.normal(0.0, 0.2, n)
    x[np.asarray(events, dtype=np.int64)] += 0.5
    return x.astype(np.float32)[:, None]


def segmented_store(path: Path, *, events: bool = True) -> Path:
    """A store like the training one with three segments, the middle one shorter than a window.

    Segments [0, 1000), [1000, 1010), [1010, 2200); events (when wanted) everywhere, including the
    first and last samples of segments.
    """
    rng = np.random.default_rng(11)
    ev = np.unique(
        np.concatenate([rng.choice(2200, 90, replace=False), [0, 999, 1000, 1009, 1010, 2199]])
    )
    return make_store(
        path,
        sensor_signal(2200, ev, seed=12),
        segments=[(0, 1000), (1000, 1010), (1010, 2200)],
        events=ev if events else [],
        rate=1.0,
        channels=["x"],
    )


# -- brute force ----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Windows:
    """Every window of a store: its start, its segment and the model's class probabilities."""

    starts: np.ndarray
    segments: np.ndarray
    probs: np.ndarray


def all_windows(model: Any, store_path: Path, window: int, stride: int) -> Windows:
    """Score every window of every segment: stride tricks over each segment, one predict each."""
    starts, segments, probs = [], [], []
    with chunkfit.open_store(store_path) as store:
        for k, (a, b) in enumerate(store.segments.tolist()):
            if b - a < window:
                continue
            x = store.read(a, b)  # [length, channels]
            cut = np.lib.stride_tricks.sliding_window_view(x, window, axis=0)[::stride]  # [n, C, W]
            probs.append(model.predict(np.ascontiguousarray(cut.transpose(0, 2, 1)), verbose=0))
            starts.append(a + stride * np.arange(cut.shape[0]))
            segments.append(np.full(cut.shape[0], k))
    return Windows(np.concatenate(starts), np.concatenate(segments), np.concatenate(probs))


def any_event(starts: np.ndarray, window: int, events: np.ndarray) -> np.ndarray:
    """True where an event lies in [start, start + window), by comparing every pair."""
    ev = np.asarray(events)[None, :]
    s = np.asarray(starts)[:, None]
    return ((ev >= s) & (ev < s + window)).any(axis=1)


def separating_threshold(scores: np.ndarray, between: tuple[float, float] = (0.4, 0.6)) -> float:
    """A threshold between these quantiles of the scores (near the median by default) that lies in
    the widest gap between neighbouring scores.

    Comparing counts at a threshold is exact only when no score sits on the threshold itself.
    """
    s = np.unique(scores.astype(np.float64))
    lo, hi = int(between[0] * s.size), int(between[1] * s.size)
    k = lo + int(np.argmax(np.diff(s[lo : hi + 1])))
    return float((s[k] + s[k + 1]) / 2)


@dataclasses.dataclass(frozen=True)
class Run:
    """One detection as the brute force sees it."""

    start: int
    end: int
    peak_score: float
    peak: int
    segment: int = 0
    peak_start: int | None = None


def most_pairs(markers: list[int], peaks: list[int], tolerance: int) -> int:
    """The largest number of (marker, peak) pairs within ``tolerance``, each used once: Kuhn's
    augmenting paths over every allowed pair."""
    owner: dict[int, int] = {}  # peak index -> marker index

    def place(m: int, seen: set[int]) -> bool:
        for d, p in enumerate(peaks):
            if abs(p - markers[m]) <= tolerance and d not in seen:
                seen.add(d)
                if d not in owner or place(owner[d], seen):
                    owner[d] = m
                    return True
        return False

    return sum(place(m, set()) for m in range(len(markers)))


def merge_runs(
    starts: np.ndarray,
    segments: np.ndarray,
    scores: np.ndarray,
    window: int,
    stride: int,
    threshold: float,
    merge_gap: int = 0,
    min_duration: int = 0,
    region: tuple[int, int] | None = None,
) -> list[Run]:
    """Walk the windows one by one: runs of consecutive positive windows of one segment; runs whose
    spans lie at most ``merge_gap`` samples apart are one event; its peak is the middle sample that
    every window of the peak's run holds in its label region, kept inside the peak window's."""
    a, b = region if region is not None else (0, window)
    runs: list[list[tuple[int, float]]] = []
    run_segment: list[int] = []
    previous: tuple[int, int, bool] | None = None
    for s, g, v in zip(starts.tolist(), segments.tolist(), scores.tolist(), strict=True):
        positive = v >= threshold
        if positive:
            if previous is not None and previous == (s - stride, g, True):
                runs[-1].append((s, v))
            else:
                runs.append([(s, v)])
                run_segment.append(g)
        previous = (s, g, positive)
    events: list[list[list[tuple[int, float]]]] = []
    event_segment: list[int] = []
    for run, g in zip(runs, run_segment, strict=True):
        if events and event_segment[-1] == g:
            end = events[-1][-1][-1][0] + window
            if run[0][0] - end <= merge_gap:
                events[-1].append(run)
                continue
        events.append([run])
        event_segment.append(g)
    out: list[Run] = []
    for event, g in zip(events, event_segment, strict=True):
        windows = [w for run in event for w in run]
        best = max(range(len(windows)), key=lambda i: (windows[i][1], -i))
        peak_start, peak_score = windows[best]
        run = next(r for r in event if (peak_start, peak_score) in r)
        common = set(range(run[0][0] + a, run[0][0] + b))
        for s, _ in run:
            common &= set(range(s + a, s + b))
        if common:
            peak = sorted(common)[(len(common) - 1) // 2]
        else:
            peak = (run[0][0] + run[-1][0] + a + b - 1) // 2
        peak = min(max(peak, peak_start + a), peak_start + b - 1)
        start, end = windows[0][0], windows[-1][0] + window
        if end - start >= min_duration:
            out.append(Run(start, end, peak_score, peak, g, peak_start))
    return out


def exact_roc_auc(positive: np.ndarray, scores: np.ndarray) -> float:
    """Share of (event, non-event) pairs the scores order correctly; ties count one half."""
    p = scores[positive][:, None].astype(np.float64)
    n = scores[~positive][None, :].astype(np.float64)
    return float(np.mean(p > n) + 0.5 * np.mean(p == n))


def exact_average_precision(positive: np.ndarray, scores: np.ndarray) -> float:
    """Sum over distinct thresholds, high to low, of precision times the recall gained there."""
    order = np.argsort(-scores.astype(np.float64), kind="stable")
    y, s = positive[order], scores[order].astype(np.float64)
    last_of_tie = np.r_[np.flatnonzero(np.diff(s) != 0), s.size - 1]
    tp = np.cumsum(y)[last_of_tie]
    precision = tp / (last_of_tie + 1)
    recall = tp / y.sum()
    return float(np.sum(np.diff(np.r_[0.0, recall]) * precision))


# -- subprocesses ---------------------------------------------------------------------------------


def run_cli_many(
    commands: Mapping[str, Sequence[str | Path]], workers: int = 2
) -> dict[str, subprocess.CompletedProcess[str]]:
    """Run several independent ``chunkfit`` commands, two at a time; results by name.

    Each command starts TensorFlow, which dominates its run time, so running them side by side
    keeps the CLI tests short.
    """
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {name: pool.submit(run_cli, *args) for name, args in commands.items()}
        return {name: f.result() for name, f in futures.items()}


def listing(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` by relative path, byte for byte (a run, a store, outputs)."""
    return {
        str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


LABEL_VALUES = (-1, 0, 5)


def labelled_signal(n: int, values: Sequence[int], seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(signal float32 [n, 1], per-sample labels int32): classes in runs of 40 samples, level
    = class."""
    rng = np.random.default_rng(seed)
    labels = np.repeat(rng.choice(values, size=n // 40 + 1), 40)[:n].astype(np.int32)
    return (labels[:, None] + rng.normal(0, 0.3, (n, 1))).astype(np.float32), labels


@functools.cache
def labelled_run(root: Path) -> Path:
    """A run trained with --label last on per-sample classes -1, 0 and 5 (channel ``a``)."""
    folder = root / "labelled"
    folder.mkdir()
    x, labels = labelled_signal(2000, LABEL_VALUES, seed=3)
    store = make_store(folder / "labelled.zarr", x, labels=labels, rate=50.0, channels=["a"])
    # validation 0.3: the last 10% (or 20%) of this signal holds no class 0 window, which is refused
    chunkfit.fit(
        "baseline-cnn",
        store,
        window=WINDOW,
        chunk=512,
        batch_size=64,
        epochs=1,
        label="last",
        validation=0.3,
        out=folder / "run",
    )
    return folder / "run"
