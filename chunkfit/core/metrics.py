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

    def choose_threshold(self, rule: str = "f1") -> dict[str, float]:
        """The decision threshold picked by ``rule`` from the scores seen, with its figures.

        ``rule`` is "f1" (the threshold maximising the event class's F1), "recall=R" (the highest
        threshold whose recall is at least R) or "precision=P" (the lowest whose precision is at
        least P). Thresholds are bin edges: a score at or above edge b/bins lies in bin b or above,
        so the figures are exact for the binned scores.
        """
        pos, neg = self.pos_hist[::-1].astype(np.float64), self.neg_hist[::-1].astype(np.float64)
        tp, fp = np.cumsum(pos), np.cumsum(neg)
        n_pos = tp[-1]
        if n_pos == 0:
            return {"value": 0.5, "precision": math.nan, "recall": math.nan, "f1": math.nan}
        predicted = tp + fp
        precision = np.divide(tp, predicted, out=np.zeros_like(tp), where=predicted > 0)
        recall = tp / n_pos
        f1 = 2 * tp / (predicted + n_pos)
        kind, _, target = rule.partition("=")
        if kind == "f1":
            i = int(np.argmax(f1))
        elif kind == "recall":
            i = int(np.argmax(recall >= float(target)))
        else:
            ok = np.flatnonzero((precision >= float(target)) & (predicted > 0))
            i = int(ok[-1]) if ok.size else int(np.argmax(precision))
        return {
            "value": (self.bins - 1 - i) / self.bins,
            "precision": float(precision[i]),
            "recall": float(recall[i]),
            "f1": float(f1[i]),
        }

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
