"""Whether the train step runs under XLA, chosen by timing both on this machine, for this model.

XLA (``tf.function(jit_compile=True)``) fuses a step's small ops: it speeds up some models' steps
and slows down others', and the order can differ on the next machine. So under ``--jit auto`` (the
default) the first training elements of the run try the step without XLA and with it
(chunkfit.train.trial), and the faster mode trains the rest; a run too short to pay for the trial
trains without XLA.

A choice measured before the run with the threads (chunkfit.train.tensorflow.threadtune), or
cached from such a measurement, needs no trial (``by: autotune at start``). ``--jit on|off``
skips the trial; ``--deterministic`` runs train without XLA: a fixed choice, so that resuming stays
bit-identical, and XLA has no deterministic form of some ops (MaxPooling's gradient:
``--jit on --deterministic`` is refused). Only the step is compiled by XLA, inside chunkfit's
multi-batch loop: XLA over the whole loop ran slower.
"""

from __future__ import annotations

from typing import Any

from ..trial import MARGIN as XLA_MARGIN
from ..trial import MIN_ELEMENTS, TRIALS, TwoModeTrial

__all__ = ["MIN_ELEMENTS", "TRIALS", "XLA_MARGIN", "JitChoice"]


class JitChoice(TwoModeTrial):
    """The XLA trial: True is the step under XLA, False without it."""

    def __init__(
        self,
        mode: str,
        deterministic: bool,
        run_elements: int,
        steps: int,
        measured: bool | None = None,
    ) -> None:
        super().__init__()
        if mode in ("on", "off"):
            self.jit = mode == "on"
            self.by = f"--jit {mode}"
        elif (
            deterministic
        ):  # XLA lacks deterministic forms of some ops, and a fixed choice keeps resume exact
            self.jit, self.by = False, "--deterministic (TensorFlow op determinism)"
        elif (
            measured is not None
        ):  # timed with the threads, before the run (chunkfit.train.tensorflow.threadtune)
            self.jit, self.by = measured, "autotune at start"
        elif run_elements < MIN_ELEMENTS:
            self.jit, self.by = (
                False,
                f"autotune: a run of {run_elements} training calls of up to {steps} batches is "
                "too short to try XLA",
            )

    def to_dict(self, batch_size: int) -> dict[str, Any]:
        out: dict[str, Any] = {"jit": self.jit, "by": self.by}
        if self.by == "autotune":
            out["windows_per_s"] = {
                ("xla" if mode else "graph"): round(batch_size / min(t), 1)
                for mode, t in self.timings.items()
                if t
            }
        return out

    def describe(self, batch_size: int) -> str:
        """Part of the run's one line on how it trains."""
        d = self.to_dict(batch_size)
        rates = d.get("windows_per_s", {})
        timed = ""
        if rates:
            graph, xla = rates.get("graph", 0), rates.get("xla", 0)
            timed = f" (without XLA {graph:,.0f}, XLA {xla:,.0f} windows/s)"
        used = "under XLA" if self.jit else "without XLA"
        return f"train step {used}, chosen by {self.by}{timed}"
