"""``chunkfit evaluate``: event- and window-level figures for a trained run on a labelled store.

The figures come back as one flat dict, one meaning per key (docs/guides/evaluate.md lists them):
the event figures (``event_*``, ``events``, ``detections``, ``false_alarms``...: detections at the
threshold matched one to one with the markers, chunkfit.core.events), then the window figures at
the same threshold (``precision``, ``recall``, ``f1``, ``accuracy``, ``confusion``), then the
threshold-free areas (``roc_auc``, ``pr_auc``). Only a model of more than two classes adds
``argmax``: accuracy and confusion matrix of the most likely class, which no threshold decides.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..config import check_matching, event_span
from ..core.events import EventScorer, event_figures, events_in, hours_of, tolerance_samples
from ..core.labels import IGNORED, event_truth
from ..core.metrics import BinaryMetrics
from ..core.pickscore import pick_stride
from ..core.scoring import ScoredBlock, score_store
from ..errors import UsageError
from ..store import Store, open_store
from .channels import ChannelsArg, mapped
from .loading import load_scorer
from .order import check_run_then_store
from .picks import evaluate_picks
from .runs import (
    SPLITS,
    RunLabeller,
    check_channels,
    check_output_folder,
    check_settings,
    check_store,
    locate_run,
    run_threshold,
    scored_ranges,
)


class _Sketch:
    """Keeps one stretch of signal, events and scores for the plot (around the first scored
    event)."""

    def __init__(self, store: Store, window: int, ranges: np.ndarray) -> None:
        ev = events_in(store, ranges)
        first = int(ev[0]) if ev.size else int(ranges[0, 0]) if ranges.size else 0
        span = max(20 * window, 2000)
        self.a = max(0, first - span // 4)
        self.b = min(store.n_samples, self.a + span)
        ev = store.events
        self.x = np.full(self.b - self.a, np.nan, dtype=np.float32)
        self.score = np.full(self.b - self.a, np.nan, dtype=np.float32)
        self.events = ev[(ev >= self.a) & (ev < self.b)] - self.a
        self.channel = store.channels[0] if store.channels else "channel 0"
        self.unit = store.units.get(self.channel)  # None: the recording named none

    def update(self, sb: ScoredBlock, score: np.ndarray) -> None:
        lo, hi = max(self.a, sb.block.start), min(self.b, sb.block.stop)
        if lo < hi:
            self.x[lo - self.a : hi - self.a] = sb.samples[
                lo - sb.block.start : hi - sb.block.start, 0
            ]
            # Each score holds until the next window start, so strided scores draw as a line
            # (NaN between them would hide it); the tail of a segment stays NaN and shows as a gap.
            for k in range(sb.block.stride):
                at = sb.starts + k
                keep = (at >= lo) & (at < hi)
                self.score[at[keep] - self.a] = score[keep]


def evaluate(
    run: str | os.PathLike[str],
    store: str | os.PathLike[str] | Store,
    *,
    threshold: float | None = None,
    chunk: int = 200_000,
    batch_size: int = 1024,
    plot: str | os.PathLike[str] | None = None,
    unsafe: bool = False,
    split: str | None = None,
    channels: ChannelsArg | None = None,
    progress: Callable[[int, int], None] | None = None,
    tolerance: float | None = None,
    match: str | None = None,
) -> dict[str, Any]:
    """Stream ``store`` block by block through the run's model and return every figure as a dict.

    On the store the run was trained on, only its validation split is scored unless ``split`` says
    otherwise ("train", "all"); on any other store, all of it (see ``runs.scored_ranges``). The
    threshold is ``threshold``, else the one the run chose on its validation split, else 0.5.
    ``channels`` maps the store's channels to the run's (chunkfit.score.channels); the figures then
    say so under "channels".
    ``progress(done, total)`` hears the windows scored so far. A marker is found when a detection's
    peak (``match`` "peak") or span ("span") lies within ``tolerance`` seconds of it, one detection
    per marker; both default to the run's own (``--tolerance``, ``--match`` at training), else
    half a window and the peak.
    """
    check_settings(threshold=threshold, chunk=chunk, batch_size=batch_size, channels=channels)
    check_matching(tolerance, match or "peak")
    if split is not None and split not in SPLITS:
        raise UsageError(f"--split must be one of {', '.join(SPLITS)} (received {split!r})")
    check_run_then_store(run, store if not isinstance(store, Store) else store.path, "evaluate")
    locate_run(
        run, unsafe=unsafe
    )  # a wrong run, plot path or store is refused before TensorFlow loads
    if plot is not None:
        check_output_folder(Path(plot), "--plot")
    own = not isinstance(store, Store)
    s = store if isinstance(store, Store) else open_store(store)
    try:
        s.check_chunks()
        check_channels(run, s, channels, unsafe=unsafe)  # before TensorFlow loads
        scorer = load_scorer(run, unsafe=unsafe, batch_size=batch_size)
        spec = scorer.spec
        cmap = check_store(spec, s, channels)
        ranges, scored = scored_ranges(spec, s, split)
        threshold, source = run_threshold(spec, threshold)
        source = scorer.threshold_source(threshold, source)
        labeller = RunLabeller(s, spec)
        w = spec.windows
        width = scorer.width
        predictor = mapped(scorer.predictor, cmap)
        exported = {"exported": scorer.exported} if scorer.exported is not None else {}
        if width is not None:  # a dense picker: its picks against the markers
            picks = evaluate_picks(predictor, s, spec, ranges, threshold, width)
            return {
                **exported,
                "picker": True,
                **picks,
                "threshold": threshold,
                "threshold_source": source,
                "scored": scored,
                "run": str(run),
                "model_loaded": spec.loaded,
                "store": str(s.path),
                "window": w.window,
                "stride": pick_stride(w.window),
            }
        metrics = BinaryMetrics(threshold=threshold)
        k = len(spec.classes)
        confusion = np.zeros((k, k), dtype=np.int64)
        if tolerance is None:
            tolerance = spec.config.get("tolerance")
        how = match or str(spec.config.get("match", "peak"))
        tol = tolerance_samples(tolerance, s.sample_rate, w.window)
        events = (
            EventScorer(
                events_in(s, ranges),
                w.window,
                w.stride,
                threshold,
                tol,
                how,
                event_span(w.label, w.window),
            )
            if s.has_events
            else None
        )
        sketch = _Sketch(s, w.window, ranges)
        for sb in score_store(
            predictor, s, w, chunk=chunk, labeller=labeller, ranges=ranges, progress=progress
        ):
            assert sb.labels is not None
            score = sb.probs[:, spec.positive]
            p_true = sb.probs[np.arange(sb.labels.size), sb.labels]
            loss = -np.log(np.clip(p_true.astype(np.float64), 1e-7, 1.0))
            metrics.update(event_truth(sb.labels, spec.positive), score, loss)
            shown = sb.labels != IGNORED  # --label-margin: a window that weighs nothing
            np.add.at(confusion, (sb.labels[shown], np.argmax(sb.probs[shown], axis=1)), 1)
            if events is not None:
                events.update(sb.starts, sb.segment, score)
            sketch.update(sb, score)
        hours = hours_of(s, ranges)
        out: dict[str, Any] = {**exported, "scored": scored}
        if cmap.line is not None:
            out["channels"] = cmap.line
        out["threshold"] = threshold
        out["threshold_source"] = source
        if events is not None:
            out.update(event_figures(events.finish(), s.sample_rate, hours, tol, how))
        windows = metrics.result()
        del windows["threshold"]
        out.update(windows)
        out["classes"] = spec.classes
        out["positive_class"] = spec.classes[spec.positive]
        if k > 2:
            out["argmax"] = {
                "accuracy": float(np.trace(confusion) / max(confusion.sum(), 1)),
                "confusion_matrix": confusion.tolist(),
            }
        out["hours"] = hours
        out["run"] = str(run)
        out["model_loaded"] = spec.loaded
        out["store"] = str(s.path)
        out["window"] = w.window
        out["stride"] = w.stride
        if plot is not None:
            _plot(Path(plot), sketch, metrics, threshold, s.sample_rate)
            out["plot"] = str(plot)
        return out
    finally:
        if own:
            s.close()


def shown_events(events: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The events (offsets into ``x``) that fall on plotted signal: not on a gap or an unscored
    stretch, where ``x`` is NaN."""
    return events[~np.isnan(x[events])] if events.size else events


def _plot(
    path: Path, sketch: _Sketch, metrics: BinaryMetrics, threshold: float, rate: float | None
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(14, 4), gridspec_kw={"width_ratios": [3, 1]})
    t = np.arange(sketch.a, sketch.b)
    xs = t / rate if rate else t
    ax1.plot(xs, sketch.x, lw=0.8, color="0.3", label=f"signal ({sketch.channel})")
    for e in shown_events(sketch.events, sketch.x):
        ax1.axvline(xs[e], color="tab:red", alpha=0.5, lw=1)
    ax1.set_xlabel("seconds" if rate else "sample")
    ax1.set_ylabel(f"{sketch.channel} ({sketch.unit or 'as stored'})")
    twin = ax1.twinx()
    twin.plot(xs, sketch.score, color="tab:blue", lw=1, label="score (window start)")
    twin.axhline(threshold, color="tab:blue", ls=":", lw=1, label=f"threshold {threshold:.3g}")
    twin.legend(loc="upper right", fontsize="small")
    twin.set_ylim(-0.02, 1.02)
    twin.set_ylabel("event score")
    ax1.set_title("signal, true events (red) and predicted scores (blue)")
    recall, precision = metrics.pr_curve()
    ax2.plot(recall, precision, color="tab:blue")
    ax2.set_xlabel("recall")
    ax2.set_ylabel("precision")
    ax2.set_xlim(0, 1.02)
    ax2.set_ylim(0, 1.02)
    ax2.set_title(f"precision-recall (AP {metrics.pr_auc():.3f})")
    ax2.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
