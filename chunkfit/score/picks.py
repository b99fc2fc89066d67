"""Evaluate and predict for a dense picker run (``--model picker``): picks instead of windows.

A picker scores every sample (chunkfit.core.pickscore); its detections are its picks, one per
peak of that score at or above the threshold, matched one to one to the markers within the pick
width (chunkfit.core.matching).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.detect import Detection, point_detections
from ..core.events import events_in, hours_of
from ..core.matching import match_events
from ..core.picks import DEFAULT_PICK_WIDTH, peak_picks
from ..core.pickscore import pick_stride, pick_traces
from ..core.scoring import Predictor
from ..store import Store
from ..train.picker import PICKERS
from .runs import RunSpec

if TYPE_CHECKING:
    import keras


def run_pick_width(model: keras.Model, spec: RunSpec) -> int | None:
    """The pick width of a picker run (run.json's, else the default); None for a classifier. A
    model that outputs a score per sample is a picker, whatever its run.json says."""
    return pick_width(spec, len(getattr(model, "output_shape", ())) == 3)


def pick_width(spec: RunSpec, per_sample: bool) -> int | None:
    """The pick width of a picker run (``per_sample``: its model scores every sample); None for a
    classifier."""
    if spec.meta.get("model") not in PICKERS and not per_sample:
        return None
    width = spec.config.get("pick_width")
    return int(width) if width is not None else DEFAULT_PICK_WIDTH


def evaluate_picks(
    predictor: Predictor,
    store: Store,
    spec: RunSpec,
    ranges: np.ndarray,
    threshold: float,
    width: int,
) -> dict[str, Any]:
    """The event figures of the picks on ``ranges`` at ``threshold`` against the markers there
    (chunkfit.core.matching.EventMatch.summary), with what was scored."""
    traces = list(pick_traces(predictor, store, spec.windows, ranges))
    picks = [lo + peak_picks(trace, threshold, width) for lo, _, trace in traces]
    found = np.concatenate(picks) if picks else np.zeros(0, dtype=np.int64)
    markers = events_in(store, np.asarray(ranges, dtype=np.int64).reshape(-1, 2))
    match = match_events(markers, found, width)
    hours = hours_of(store, ranges)
    out = match.summary(store.sample_rate or 1.0, hours if hours is not None else math.nan)
    out["samples"] = int(sum(hi - lo for lo, hi, _ in traces))
    out["pick_width"] = width
    out["tolerance_samples"] = width
    out["hours"] = hours
    return out


def predicted_picks(
    predictor: Predictor,
    store: Store,
    spec: RunSpec,
    threshold: float,
    width: int,
    *,
    chunk: int,
) -> Iterator[tuple[int, np.ndarray, list[Detection]]]:
    """Per segment: (its first sample, its per-sample scores, its picks as detections of one
    sample each, peak score and time at the pick)."""
    for lo, _, trace in pick_traces(predictor, store, spec.windows, store.segments, chunk=chunk):
        at = peak_picks(trace, threshold, width)
        yield lo, trace, point_detections(lo + at, trace[at], store.segments)


def scored_windows(store: Store, spec: RunSpec) -> int:
    """How many windows a picker scores over the store (its stride is half the window)."""
    w, s = spec.windows.window, pick_stride(spec.windows.window)
    seg = np.asarray(store.segments, dtype=np.int64).reshape(-1, 2)
    n = seg[:, 1] - seg[:, 0]
    return int(np.where(n >= w, (n - w) // s + 1, 0).sum())
