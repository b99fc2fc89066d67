"""The decision threshold a run chooses at the end of training, on its validation split.

A fixed 0.5 finds nothing when events are rare (a model whose event scores reach 0.3 has recall 0
there, whatever its PR-AUC). The run scores its validation windows once with the trained model
and keeps the threshold that maximises the event class's F1 (or meets ``--threshold-for
recall=0.9`` / ``precision=0.8``); evaluate and predict use it unless given ``--threshold``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..config import WindowSpec
from ..errors import UsageError
from ..store import Store
from ..train.blocks import Labeller
from .metrics import BinaryMetrics
from .runs import RunSpec
from .scorer import score_store

if TYPE_CHECKING:
    import keras


def check_rule(rule: str) -> str:
    """Refuse a ``--threshold-for`` that is not ``f1``, ``recall=R`` or ``precision=P`` (R, P in (0, 1])."""
    kind, _, target = rule.partition("=")
    try:
        ok = rule == "f1" or (kind in ("recall", "precision") and 0.0 < float(target) <= 1.0)
    except ValueError:
        ok = False
    if not ok:
        raise UsageError(f"--threshold-for must be f1, recall=R or precision=P with R, P in (0, 1] (received {rule!r})")
    return rule


def choose_threshold(model: keras.Model, store: Store, labeller: Labeller, windows: WindowSpec,
                     ranges: np.ndarray, rule: str) -> dict[str, Any] | None:
    """Score the windows of ``ranges`` (the validation split) and pick the threshold by ``rule``;
    None when there is no validation window or no event among them."""
    ranges = np.asarray(ranges, dtype=np.int64).reshape(-1, 2)
    ranges = ranges[ranges[:, 1] > ranges[:, 0]]
    if ranges.size == 0:
        return None
    spec = RunSpec("training", windows, list(labeller.classes), list(store.channels), store.n_channels, {}, "in training")
    metrics = BinaryMetrics()
    for sb in score_store(model, store, spec, labeller=labeller, ranges=ranges):
        assert sb.labels is not None
        metrics.update(sb.labels == spec.positive, sb.probs[:, spec.positive])
    if metrics.n == 0 or not metrics.pos_hist.any():
        return None
    chosen = {**metrics.choose_threshold(rule), "rule": rule, "split": "validation", "pr_auc": metrics.pr_auc(),
              "positive_windows": int(metrics.pos_hist.sum()), "windows": metrics.n}
    if store.has_events:
        chosen.update(_event_level(model, store, spec, labeller, ranges, chosen["value"]))
    return chosen


def _event_level(model: keras.Model, store: Store, spec: RunSpec, labeller: Labeller, ranges: np.ndarray,
                 threshold: float) -> dict[str, Any]:
    """Events covered and false alarms at ``threshold``: a second pass over the validation windows
    (the threshold is known only after the first, and their scores are not kept)."""
    from .evaluate import EventLevel, events_in

    w = spec.windows
    events = EventLevel(events_in(store, ranges), w.window, w.stride, threshold)
    for sb in score_store(model, store, spec, labeller=labeller, ranges=ranges):
        events.update(sb, sb.probs[:, spec.positive])
    events.finish()
    hours = float((ranges[:, 1] - ranges[:, 0]).sum()) / store.sample_rate / 3600 if store.sample_rate else None
    return {"events": int(events.events.size), "events_covered": int(events.covered.sum()),
            "false_alarms": events.false_alarms,
            "false_alarms_per_hour": events.false_alarms / hours if hours else None}
