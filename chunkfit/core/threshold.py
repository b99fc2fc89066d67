"""The decision threshold a run chooses at the end of training, on its validation split.

A fixed 0.5 finds nothing when events are rare (a model whose event scores reach 0.3 has recall 0
there, whatever its PR-AUC). The run scores its validation windows once with the trained model
and, by default (``--threshold-for event-f1``), keeps the threshold whose detections, matched one
to one with the split's event markers (chunkfit.core.events), have the highest event F1. The
candidates are a few dozen bin edges of the score histogram (``BinaryMetrics.candidates``), each
turned into detections from the same scores: kept in memory up to ``KEEP_WINDOWS`` windows, else
scored once more, every candidate's detections merged in that one pass. ``f1`` maximises the
window-level F1 instead; ``recall=0.9`` / ``precision=0.8`` meet a window-level target. A store
without event markers falls back from event-f1 to f1, and says so in the rule recorded.
evaluate and predict use the threshold unless given ``--threshold``; the training loop does the
same at the end of every epoch, for the epoch's logs.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from ..config import WindowSpec, event_span
from ..store import Store
from .events import EventScorer, event_figures, events_in, hours_of, tolerance_samples
from .labels import Labeller, event_truth, positive_index
from .matching import EventMatch
from .metrics import BinaryMetrics
from .scoring import Predictor, score_store

# Validation windows whose scores are kept (4 bytes each, with 8 for the start) for the events'
# figures; a longer validation split is scored a second time instead.
KEEP_WINDOWS = 4_000_000

Scored = Iterable[tuple[np.ndarray, int, np.ndarray]]


def choose_threshold(
    predictor: Predictor,
    store: Store,
    labeller: Labeller,
    windows: WindowSpec,
    ranges: np.ndarray,
    rule: str,
    tolerance: float | None = None,
    match: str = "peak",
) -> dict[str, Any] | None:
    """Score the windows of ``ranges`` (the validation split) with ``predictor`` (the trained
    model's compiled scorer) and pick the threshold by ``rule`` (checked by
    chunkfit.config.check_rule); None when there is no validation window or no event among them.
    ``tolerance`` (seconds; None: half a window) and ``match`` (peak or span) pair detections with
    markers (chunkfit.core.events)."""
    ranges = np.asarray(ranges, dtype=np.int64).reshape(-1, 2)
    ranges = ranges[ranges[:, 1] > ranges[:, 0]]
    if ranges.size == 0:
        return None
    positive = positive_index(labeller.n_classes)
    metrics = BinaryMetrics()
    kept: list[tuple[np.ndarray, int, np.ndarray]] | None = [] if store.has_events else None
    for sb in score_store(predictor, store, windows, labeller=labeller, ranges=ranges):
        assert sb.labels is not None
        score = sb.probs[:, positive]
        metrics.update(event_truth(sb.labels, positive), score)
        if kept is not None:
            kept.append((sb.starts, sb.segment, score.copy()))
            if metrics.n > KEEP_WINDOWS:  # scored again for the events instead
                kept = None
    if metrics.n == 0 or not metrics.pos_hist.any():
        return None
    markers = events_in(store, ranges) if store.has_events else np.zeros(0, dtype=np.int64)
    on_events = rule == "event-f1" and markers.size > 0
    used = rule if on_events or rule != "event-f1" else "f1 (no event markers to match)"
    chosen: dict[str, Any] = {
        **metrics.choose_threshold("f1" if rule == "event-f1" else rule),
        "rule": used,
        "split": "validation",
        "pr_auc": metrics.pr_auc(),
        "positive_windows": int(metrics.pos_hist.sum()),
        "windows": metrics.n,
        "score_range": list(metrics.score_range()),
    }
    if not store.has_events:
        return chosen
    scored: Scored = (
        kept if kept is not None else _scored_again(predictor, store, windows, labeller, ranges)
    )
    tol = tolerance_samples(tolerance, store.sample_rate, windows.window)
    candidates = metrics.candidates() if on_events else [chosen["value"]]
    matches = _matches(markers, windows, candidates, tol, match, scored)
    best = _best(candidates, matches) if on_events else candidates[0]
    chosen.update(metrics.at(best) if on_events else {})
    chosen.update(
        event_figures(matches[best], store.sample_rate, hours_of(store, ranges), tol, match)
    )
    if on_events:
        chosen["candidates"] = len(candidates)
    return chosen


def _scored_again(
    predictor: Predictor, store: Store, windows: WindowSpec, labeller: Labeller, ranges: np.ndarray
) -> Scored:
    positive = positive_index(labeller.n_classes)
    return (
        (sb.starts, sb.segment, sb.probs[:, positive])  # streamed: bounded memory
        for sb in score_store(predictor, store, windows, labeller=labeller, ranges=ranges)
    )


def _matches(
    markers: np.ndarray,
    w: WindowSpec,
    thresholds: list[float],
    tolerance: int,
    match: str,
    scored: Scored,
) -> dict[float, EventMatch]:
    """The detections at each of ``thresholds``, from one pass over the validation windows'
    ``scored`` (starts, segment, score) blocks in order, matched with ``markers``."""
    region = event_span(w.label, w.window)
    scorers = {
        t: EventScorer(markers, w.window, w.stride, t, tolerance, match, region) for t in thresholds
    }
    for starts, segment, score in scored:
        for scorer in scorers.values():
            scorer.update(starts, segment, score)
    return {t: scorer.finish() for t, scorer in scorers.items()}


def _best(candidates: list[float], matches: dict[float, EventMatch]) -> float:
    """The candidate with the highest event F1; of several, the middle one, so that a model whose
    scores saturate gets a threshold inside its range rather than at its edge."""
    f1 = [-1.0 if math.isnan(matches[t].f1) else matches[t].f1 for t in candidates]
    tied = [t for t, f in zip(candidates, f1, strict=True) if f == max(f1)]
    return tied[len(tied) // 2]
