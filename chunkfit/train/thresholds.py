"""The decision threshold a run picks on its validation split with the model as trained so far.

At the end of every epoch it gives the epoch's event figures (``val_threshold``,
``val_event_f1``, ``val_false_alarms_per_hour``); at the end of the run, the threshold
recorded in run.json, said on one line (chunkfit.core.threshold chooses it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..config import FitOptions
from ..core.events import events_in
from ..core.pickscore import choose_pick_threshold
from ..core.plan import TrainPlan
from ..core.threshold import choose_threshold
from ..store import Store
from .engines import Engine, EngineEntry, Predictor
from .precision import float32_model
from .progress import TrainProgress
from .verdict import verdict

if TYPE_CHECKING:
    import keras

# Windows per batch of the per-epoch threshold scoring
SCORING_BATCH = 1024


class ThresholdScoring:
    """Scores the validation split with the trained model's compiled scorer, made once.

    ``model`` is the model being trained: a threshold chosen at an epoch's end is reused at the end
    of the run while the model still holds that epoch's weights.
    """

    def __init__(
        self,
        engine: Engine,
        entry: EngineEntry,
        model: keras.Model,
        opts: FitOptions,
        store: Store,
        plan: TrainPlan,
        progress: Callable[[TrainProgress], None] | None,
        pick_width: int | None = None,
        float32: bool = False,
    ) -> None:
        self.float32 = float32  # a bfloat16 run scores a float32 copy, as its model.keras will
        self.pick_width = pick_width  # a picker's: its threshold is chosen on its picks
        self.entry = entry
        self.engine, self.model, self.opts, self.store, self.plan, self.progress = (
            engine,
            model,
            opts,
            store,
            plan,
            progress,
        )
        self._scoring: tuple[keras.Model, Predictor] | None = None
        self.warnings: list[str] = []  # the verdict, once the run is over
        # the last epoch's choice, and the weights it was made with
        self._last_chosen: tuple[dict[str, Any] | None, list[Any]] | None = None

    def _scorer(self) -> tuple[keras.Model, Predictor]:
        """The model that takes raw signal and its engine's compiled scorer, made once: it shares
        the trained model's weights, so it scores them as they are now."""
        if self._scoring is None:
            exported = self.engine.exported()
            if self.float32:
                exported = float32_model(exported)
            self._scoring = (
                exported,
                self.entry.predictor(
                    exported, self.opts.windows.window, self.store.n_channels, SCORING_BATCH
                ),
            )
        elif self.float32:  # the copy holds the weights as they are now
            self._scoring[0].set_weights(self.engine.exported().get_weights())
        return self._scoring

    def _choose(self) -> dict[str, Any] | None:
        _, predictor = self._scorer()
        plan = self.plan
        if self.pick_width is not None:
            return choose_pick_threshold(
                predictor, self.store, self.opts.windows, plan.split.validation, self.pick_width
            )
        return choose_threshold(
            predictor,
            self.store,
            plan.labeller,
            self.opts.windows,
            plan.split.validation,
            self.opts.threshold_for,
            self.opts.tolerance,
            self.opts.match,
        )

    def event_logs(self) -> dict[str, float]:
        """The epoch's figures at the threshold chosen on the validation split now, when the store
        has event markers: ``val_threshold``, ``val_event_f1`` (detections matched one to one with
        the split's markers, chunkfit.core.events) and ``val_false_alarms_per_hour``
        (``val_false_alarms`` without a sample rate). Window-level precision, recall and F1 stay
        at 0.5, as Keras computes them."""
        if not self.store.has_events:
            return {}
        chosen = self._choose()
        self._last_chosen = chosen, [w.numpy() for w in self.model.weights]
        if chosen is None or "events" not in chosen:
            return {}
        out = {"val_threshold": float(chosen["value"]), "val_event_f1": float(chosen["event_f1"])}
        per_hour = chosen["false_alarms_per_hour"]
        if per_hour is None:
            out["val_false_alarms"] = float(chosen["false_alarms"])
        else:
            out["val_false_alarms_per_hour"] = float(per_hour)
        return out

    def final(self) -> dict[str, Any] | None:
        """The run's decision threshold, said on one line: the last epoch's choice when the model
        still holds that epoch's weights (no callback restored others), else chosen now; then the
        verdict's ``warning:`` lines (chunkfit.train.verdict), kept in ``warnings``."""
        last = self._last_chosen
        if last is not None and _same(last[1], self.model.weights):
            chosen = last[0]
        else:
            chosen = self._choose()
        self.warnings = verdict(chosen, self._validation_events(chosen))
        lines = ([_line(chosen)] if chosen is not None else []) + self.warnings
        if self.progress is not None:
            epochs = self.opts.epochs
            for line in lines:
                self.progress(TrainProgress.notice(line, epochs=epochs, epoch=epochs - 1, done=1.0))
        return chosen

    def _validation_events(self, chosen: dict[str, Any] | None) -> int | None:
        """The event markers in the validation split (None: the store has none at all)."""
        if not self.store.has_events:
            return None
        if chosen is not None and "events" in chosen:
            return int(chosen["events"])
        return int(events_in(self.store, self.plan.split.validation).size)


def _line(chosen: dict[str, Any]) -> str:
    """The run's threshold and its figures, in words: the threshold, the events, then the windows,
    a line each, short enough for a narrow terminal."""
    lines = [f"threshold {chosen['value']:.4g} chosen on the validation split ({chosen['rule']})"]
    if "events" in chosen:
        per_hour = chosen["false_alarms_per_hour"]
        alarms = f"{chosen['false_alarms']}" + ("" if per_hour is None else f" ({per_hour:.3g}/h)")
        lines.append(
            f"  events: found {chosen['event_found']}/{chosen['events']}, precision "
            f"{chosen['event_precision']:.3f}, recall {chosen['event_recall']:.3f}, F1 "
            f"{chosen['event_f1']:.3f}, false alarms {alarms}"
        )
    lines.append(
        f"  windows: PR-AUC {chosen['pr_auc']:.3f}, precision {chosen['precision']:.3f}, "
        f"recall {chosen['recall']:.3f}, F1 {chosen['f1']:.3f}"
    )
    return "\n".join(lines)


def _same(saved: list[Any], weights: list[Any]) -> bool:
    """Whether ``weights`` still hold the ``saved`` values."""
    import numpy as np

    return len(saved) == len(weights) and all(
        np.array_equal(a, w.numpy()) for a, w in zip(saved, weights, strict=True)
    )
