"""The verdict at the end of training: ``warning:`` lines on a run that will not detect much, and
the ``--fail-under`` targets a pipeline checks.

The rules look at what the run chose on its validation split (chunkfit.core.threshold), each
warning saying the figure and what to try (docs/troubleshooting.md explains them):

- fewer than ``MIN_EVENTS`` event markers in the validation split: its figures and threshold rest
  on too few events to trust;
- the threshold within ``EDGE`` (a share of the range) of the lowest or highest validation score
  while its F1 (of events, else of windows) is under ``GOOD_F1``: the model barely tells events
  from the rest, and the threshold is whatever the extreme gives (a confident model whose event
  windows score 1 and whose threshold sits just under 1 is fine);
- event recall under ``MIN_RECALL``;
- more than ``MAX_FALSE_ALARMS_PER_HOUR`` false alarms per hour, and at least as many as the
  split's events (a heart-beat detector with 2,000 beats an hour may raise 20 false alarms an
  hour; a detector of ten quakes an hour may not).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import BelowTargetError, UsageError

MIN_EVENTS = 3
EDGE = 0.01
GOOD_F1 = 0.8
MIN_RECALL = 0.5
MAX_FALSE_ALARMS_PER_HOUR = 10.0

# figures --fail-under may name: the run's own, recorded in run.json's "threshold"
TARGETS = ("event_f1", "event_recall", "event_precision", "pr_auc", "f1", "precision", "recall")


def verdict(chosen: dict[str, Any] | None, validation_events: int | None) -> list[str]:
    """The ``warning:`` lines for a run whose threshold choice was ``chosen`` (None: nothing to
    choose on), with ``validation_events`` markers in its validation split (None: the store has no
    markers)."""
    out: list[str] = []
    if validation_events is not None and validation_events < MIN_EVENTS:
        out.append(
            f"warning: the validation split holds {validation_events} event(s), fewer than "
            f"{MIN_EVENTS}: its threshold and figures rest on too few to trust; hold out more "
            "(--validation 0.3, or --validation-segments) or mark more events"
        )
    if chosen is None:
        return out
    low, high = chosen.get("score_range", (math.nan, math.nan))
    value = chosen["value"]
    f1 = chosen.get("event_f1", chosen.get("f1", math.nan))
    if high > low and not f1 >= GOOD_F1:
        margin = EDGE * (high - low)
        if value <= low + margin:
            out.append(
                f"warning: the threshold {value:.3g} sits at the bottom of the validation scores "
                f"({low:.3g} to {high:.3g}): the model barely tells events from the rest; train "
                "longer (--epochs), try --class-weight none or another --model, and look at "
                "curves.png"
            )
        elif value >= high - margin:
            out.append(
                f"warning: the threshold {value:.3g} sits at the top of the validation scores "
                f"({low:.3g} to {high:.3g}): only the very highest scores fire; train longer "
                "(--epochs) or choose by another rule (--threshold-for recall=0.9)"
            )
    recall = chosen.get("event_recall")
    if recall is not None and not math.isnan(recall) and recall < MIN_RECALL:
        tolerance = chosen.get("tolerance_s")
        within = f" within {tolerance:.3g} s" if tolerance is not None else ""
        out.append(
            f"warning: event recall {recall:.2f}: {chosen['event_found']} of {chosen['events']} "
            f"validation events found{within}; train longer (--epochs), widen --tolerance if "
            "the detections come late, or try another --model"
        )
    per_hour = chosen.get("false_alarms_per_hour")
    if (
        per_hour is not None
        and per_hour > MAX_FALSE_ALARMS_PER_HOUR
        and chosen["false_alarms"] >= chosen["events"]
    ):
        out.append(
            f"warning: {per_hour:.3g} false alarms per hour ({chosen['false_alarms']} against "
            f"{chosen['events']} validation events): raise the threshold (--threshold-for "
            "precision=0.8, or --threshold at predict), train longer, or mark the events the "
            "detections found"
        )
    return out


def parse_targets(texts: Sequence[str] | None) -> dict[str, float]:
    """``--fail-under FIGURE=VALUE`` (repeated, or comma separated) as {figure: value}."""
    out: dict[str, float] = {}
    for text in texts or ():
        for part in text.split(","):
            name, eq, value = part.strip().partition("=")
            try:
                number = float(value)
            except ValueError:
                number = math.nan
            if not eq or name not in TARGETS or not math.isfinite(number):
                raise UsageError(
                    f"--fail-under must be FIGURE=VALUE with FIGURE one of {', '.join(TARGETS)}, "
                    f"e.g. --fail-under event_f1=0.8 (received {part.strip()!r})"
                )
            out[name] = number
    return out


def check_targets(chosen: dict[str, Any] | None, targets: Mapping[str, float], run: str) -> None:
    """Raise BelowTargetError naming the first of ``targets`` the run's ``chosen`` figures miss (a
    figure the run could not measure misses its target)."""
    for name, target in targets.items():
        value = None if chosen is None else chosen.get(name)
        if value is None or math.isnan(value):
            raise BelowTargetError(
                f"{run}: written, but {name} could not be measured on the validation split (no "
                f"event markers there?), so --fail-under {name}={target:g} is not met"
            )
        if value < target:
            raise BelowTargetError(
                f"{run}: written, but {name} {value:.3f} is under --fail-under {name}={target:g}"
            )
