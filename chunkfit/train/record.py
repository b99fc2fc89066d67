"""run.json: what a run was asked to do, what each epoch measured, and where the run was resumed."""

from __future__ import annotations

import resource
import sys
import time
from typing import Any

from .._version import __version__
from .cursor import Cursor


def peak_rss_bytes() -> int:
    """Peak resident memory of this process so far."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


class RunLog:
    """What a run has done so far: one record per finished epoch, the cursors it was resumed at, and
    its wall clock (which runs on across resumes). ``about`` is the part of run.json that does not
    change while the run trains (settings, store, split, blocks, threads)."""

    def __init__(self, about: dict[str, Any], seed: int) -> None:
        self.about = about
        self.seed = seed
        self.epochs: list[dict[str, Any]] = []
        self.resumes: list[dict[str, int]] = []
        self.started = time.perf_counter()

    def wall_seconds(self) -> float:
        return time.perf_counter() - self.started

    def restore(
        self, epochs: list[dict[str, Any]], resumes: list[dict[str, int]], wall_seconds: float
    ) -> None:
        """Continue the log of a checkpoint's run (``resumes`` already holds this resume)."""
        self.epochs, self.resumes = list(epochs), list(resumes)
        self.started = time.perf_counter() - wall_seconds

    def record(self, *, finished: bool, stopped: bool) -> dict[str, Any]:
        """run.json's content now."""
        trained = sum(r["train_windows"] for r in self.epochs)
        train_s = sum(r["train_seconds"] for r in self.epochs)
        last = self.epochs[-1]["epoch"] if self.epochs else -1
        return {
            "chunkfit": __version__,
            "finished": finished,
            **self.about,
            "epochs": self.epochs,
            "stopped_early": stopped,
            "cursor": Cursor(self.seed, last + 1, 0).to_dict(),
            "resumes": self.resumes,
            "windows_per_s": round(trained / train_s, 1) if train_s > 0 else None,
            "wall_seconds": round(self.wall_seconds(), 3),
            "peak_rss_bytes": peak_rss_bytes(),
        }
