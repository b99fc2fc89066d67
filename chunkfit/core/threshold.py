"""The decision threshold a run chooses at the end of training, on its validation split.

A fixed 0.5 finds nothing when events are rare (a model whose event scores reach 0.3 has recall 0
there, whatever its PR-AUC). The run scores its validation windows once with the trained model
and keeps the threshold that maximises the event class's F1 (or meets ``--threshold-for
recall=0.9`` / ``precision=0.8``); evaluate and predict use it unless given ``--threshold``. With
event markers, the events covered and the false alarms at that threshold come from the same
scores. The training loop does the same at the end of every epoch, for the epoch's logs.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from ..config import WindowSpec
from ..store import Store
from .events import EventLevel, events_in
from .labels import Labeller, event_truth, positive_index
from .metrics import BinaryMetrics
from .scoring import Predictor, score_store

# Validation windows whose scores are kept (4 bytes each, with 8 for the start) for the events'
# figures; a longer validation split is scored a second time instead.
KEEP_WINDOWS = 4_000_000


def choose_threshold(
    predictor: Predictor,
    store: Store,
    labeller: Labeller,
    windows: WindowSpec,
    ranges: np.ndarray,
    rule: str,
) -> dict[str, Any] | None:
    """Score the windows of ``ranges`` (the validation split) with ``predictor`` (the trained
    model's compiled scorer) and pick the threshold by ``rule`` (checked by
    chunkfit.config.check_rule); None when there is no validation window or no event among them."""
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
    chosen: dict[str, Any] = {
        **metrics.choose_threshold(rule),
        "rule": rule,
        "split": "validation",
        "pr_auc": metrics.pr_auc(),
        "positive_windows": int(metrics.pos_hist.sum()),
        "windows": metrics.n,
    }
    if store.has_events:
        if kept is None:
            again = (
                (sb.starts, sb.segment, sb.probs[:, positive])  # streamed: bounded memory
                for sb in score_store(predictor, store, windows, labeller=labeller, ranges=ranges)
            )
            chosen.update(_event_level(store, windows, ranges, chosen["value"], again))
        else:
            chosen.update(_event_level(store, windows, ranges, chosen["value"], kept))
    return chosen


def _event_level(
    store: Store,
    w: WindowSpec,
    ranges: np.ndarray,
    threshold: float,
    scored: Iterable[tuple[np.ndarray, int, np.ndarray]],
) -> dict[str, Any]:
    """Events covered and false alarms at ``threshold``, from the validation windows' ``scored``
    (starts, segment, score) blocks in order."""
    events = EventLevel(events_in(store, ranges), w.window, w.stride, threshold)
    for starts, segment, score in scored:
        events.update(starts, segment, score)
    events.finish()
    hours = (
        float((ranges[:, 1] - ranges[:, 0]).sum()) / store.sample_rate / 3600
        if store.sample_rate
        else None
    )
    return {
        "events": int(events.events.size),
        "events_covered": int(events.covered.sum()),
        "false_alarms": events.false_alarms,
        "false_alarms_per_hour": events.false_alarms / hours if hours else None,
    }
