"""Streaming classification metrics: accumulate block by block, never holding every window.

ROC-AUC and PR-AUC come from score histograms (``bins`` equal-width bins on [0, 1]); scores that
share a bin count as ties, so the error is bounded by the share of pairs within one bin (below
1e-4 with the default 100,000 bins on any realistic score spread).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np


class BinaryMetrics:
    """Accumulates labels (0/1), event-class scores and losses; ``result()`` gives the figures."""

    def __init__(self, threshold: float = 0.5, bins: int = 100_000) -> None:
        self.threshold = threshold
        self.bins = bins
        self.pos_hist = np.zeros(bins, dtype=np.int64)
        self.neg_hist = np.zeros(bins, dtype=np.int64)
        self.confusion = np.zeros((2, 2), dtype=np.int64)  # [true, predicted]
        self.loss_sum = 0.0
        self.n = 0

    def update(self, y_true: np.ndarray, score: np.ndarray, loss: np.ndarray | None = None) -> None:
        """Add windows: ``y_true`` 1/0 (or bool) per window; -1 (a window the label margin leaves
        out, chunkfit.core.labels.event_truth) is skipped."""
        y_in = np.asarray(y_true)
        keep = y_in >= 0
        if not keep.all():
            y_in, score = y_in[keep], np.asarray(score)[keep]
            loss = None if loss is None else np.asarray(loss)[keep]
        y = y_in.astype(bool)
        s = np.clip(np.asarray(score, dtype=np.float64), 0.0, 1.0)
        idx = np.minimum((s * self.bins).astype(np.int64), self.bins - 1)
        self.pos_hist += np.bincount(idx[y], minlength=self.bins)
        self.neg_hist += np.bincount(idx[~y], minlength=self.bins)
        pred = s >= self.threshold
        self.confusion[0, 0] += int(np.sum(~y & ~pred))
        self.confusion[0, 1] += int(np.sum(~y & pred))
        self.confusion[1, 0] += int(np.sum(y & ~pred))
        self.confusion[1, 1] += int(np.sum(y & pred))
        if loss is not None:
            self.loss_sum += float(np.sum(loss, dtype=np.float64))
        self.n += int(y.size)

    def roc_auc(self) -> float:
        """Area under the ROC curve; ties within a bin count one half."""
        # float64: pair counts (events x non-events) overflow int64 beyond about 3e9 windows each
        pos, neg = self.pos_hist.astype(np.float64), self.neg_hist.astype(np.float64)
        n_pos, n_neg = float(pos.sum()), float(neg.sum())
        if n_pos == 0 or n_neg == 0:
            return math.nan
        neg_below = np.cumsum(neg) - neg  # negatives in strictly lower bins
        wins = float(np.sum(pos * neg_below)) + 0.5 * float(np.sum(pos * neg))
        return wins / (n_pos * n_neg)

    def pr_auc(self) -> float:
        """Average precision: sum over thresholds (bins, high to low) of precision x recall step."""
        pos, neg = self.pos_hist[::-1], self.neg_hist[::-1]
        n_pos = int(pos.sum())
        if n_pos == 0:
            return math.nan
        tp = np.cumsum(pos)
        fp = np.cumsum(neg)
        keep = pos > 0
        precision = tp[keep] / (tp[keep] + fp[keep])
        return float(np.sum(precision * pos[keep]) / n_pos)

    def pr_curve(self, points: int = 200) -> tuple[np.ndarray, np.ndarray]:
        """(recall, precision) at up to ``points`` thresholds, for plotting.

        The thresholds are spread evenly over the windows predicted positive, not over the score
        range, so the curve keeps its detail when scores crowd into a narrow band.
        """
        pos, neg = self.pos_hist[::-1], self.neg_hist[::-1]
        tp, fp = np.cumsum(pos), np.cumsum(neg)
        predicted = tp + fp
        if predicted[-1] == 0:
            return np.zeros(0), np.zeros(0)
        wanted = np.linspace(1, predicted[-1], points)
        take = np.unique(np.searchsorted(predicted, wanted, "left"))
        return tp[take] / max(int(tp[-1]), 1), tp[take] / predicted[take]

    def _curves(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, float]:
        """(predicted, precision, recall, f1, events) at each bin edge, highest threshold first:
        entry i is the threshold (bins - 1 - i) / bins."""
        pos, neg = self.pos_hist[::-1].astype(np.float64), self.neg_hist[::-1].astype(np.float64)
        tp, fp = np.cumsum(pos), np.cumsum(neg)
        n_pos = float(tp[-1])
        predicted = tp + fp
        precision = np.divide(tp, predicted, out=np.zeros_like(tp), where=predicted > 0)
        recall = tp / n_pos if n_pos else np.full_like(tp, math.nan)
        f1 = 2 * tp / (predicted + n_pos) if n_pos else np.full_like(tp, math.nan)
        return predicted, precision, recall, f1, n_pos

    def _edge(self, i: int) -> dict[str, float]:
        _, precision, recall, f1, _ = self._curves()
        return {
            "value": (self.bins - 1 - i) / self.bins,
            "precision": float(precision[i]),
            "recall": float(recall[i]),
            "f1": float(f1[i]),
        }

    def choose_threshold(self, rule: str = "f1") -> dict[str, float]:
        """The decision threshold picked by ``rule`` from the scores seen, with its figures.

        ``rule`` is "f1" (the threshold maximising the event class's F1), "recall=R" (the highest
        threshold whose recall is at least R) or "precision=P" (the lowest whose precision is at
        least P). Thresholds are bin edges: a score at or above edge b/bins lies in bin b or above,
        so the figures are exact for the binned scores.
        """
        predicted, precision, recall, f1, n_pos = self._curves()
        if n_pos == 0:
            return {"value": 0.5, "precision": math.nan, "recall": math.nan, "f1": math.nan}
        kind, _, target = rule.partition("=")
        if kind == "recall":
            i = int(np.argmax(recall >= float(target)))
        elif kind == "precision":
            ok = np.flatnonzero((precision >= float(target)) & (predicted > 0))
            i = int(ok[-1]) if ok.size else int(np.argmax(precision))
        else:
            i = int(np.argmax(f1))
        return self._edge(i)

    def at(self, value: float) -> dict[str, float]:
        """The window figures at threshold ``value``, a bin edge (one of ``candidates``)."""
        i = self.bins - 1 - int(round(value * self.bins))
        return self._edge(min(max(i, 0), self.bins - 1))

    def candidates(self, levels: int = 24) -> list[float]:
        """A few dozen thresholds worth turning into detections, for a choice on event figures.

        Bin edges where the event-class windows at or above reach 1/levels, 2/levels, ... of them
        (the recall levels), where the windows predicted positive reach 1/8 to 16 times the
        event-class windows (the false-alarm side), and the window-F1 choice: what the events can
        make of each is measured, not guessed.
        """
        predicted, _, _, f1, n_pos = self._curves()
        if n_pos == 0:
            return []
        tp = predicted - np.cumsum(self.neg_hist[::-1])
        at = np.searchsorted(tp, np.ceil(n_pos * np.arange(1, levels + 1) / levels), "left")
        wanted = n_pos * 2.0 ** np.arange(-3, 5)
        at = np.concatenate([at, np.searchsorted(predicted, wanted, "left"), [np.argmax(f1)]])
        at = np.unique(np.clip(at, 0, self.bins - 1))
        return sorted(((self.bins - 1 - at) / self.bins).tolist())

    def score_range(self) -> tuple[float, float]:
        """The lowest and highest score seen, to a bin: (low edge of the lowest occupied bin, high
        edge of the highest)."""
        seen = np.flatnonzero(self.pos_hist + self.neg_hist)
        if seen.size == 0:
            return math.nan, math.nan
        return float(seen[0]) / self.bins, float(seen[-1] + 1) / self.bins

    def result(self) -> dict[str, Any]:
        (tn, fp), (fn, tp) = self.confusion.tolist()
        precision = tp / (tp + fp) if tp + fp else math.nan
        recall = tp / (tp + fn) if tp + fn else math.nan
        f1 = (
            2 * precision * recall / (precision + recall)
            if tp and not (math.isnan(precision) or math.isnan(recall))
            else (0.0 if tp + fp + fn else math.nan)
        )
        return {
            "windows": self.n,
            "loss": self.loss_sum / self.n if self.n else math.nan,
            "accuracy": (tp + tn) / self.n if self.n else math.nan,
            "precision": precision,
            "recall": recall,
            "f1": f1,
            "roc_auc": self.roc_auc(),
            "pr_auc": self.pr_auc(),
            "threshold": self.threshold,
            "confusion": {"tn": tn, "fp": fp, "fn": fn, "tp": tp},
        }
