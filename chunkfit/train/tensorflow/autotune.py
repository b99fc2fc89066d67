"""Whether the train step runs under XLA, chosen by timing both on this machine, for this model.

XLA (``tf.function(jit_compile=True)``) fuses a step's small ops: on a 2-core AMD EPYC it ran
baseline-cnn's step 1.8x faster, while it ran dilated-resnet's slower, and the order can differ on
the next machine. So under ``--jit auto`` (the default) the first training elements of the run
alternate between the step without XLA and with it, each timed, and the faster mode trains the
rest. The trial elements are real training (each window still trained once, by one mode or the
other), so what the trial costs is XLA's compile and the slower mode's share of ``TRIALS`` elements;
a run of fewer than ``MIN_ELEMENTS`` elements, too short to pay for that, trains without XLA.
Timings are per batch and the best of each mode's counts, so a moment of load elsewhere on the
machine does not decide. XLA must beat the step without it by ``XLA_MARGIN``: the trial's elements
flattered XLA (on a 2-core Zen 4 EPYC, baseline-cnn on every core, the trial timed XLA at 0.95x and
1.08x the step without it, while whole epochs trained at 0.76-0.88x), and a close call is not worth
a slower run.

A choice measured before the run with the threads (chunkfit.train.tensorflow.threadtune), or
cached from such a measurement, needs no trial (``by: autotune at start``). ``--jit on|off``
skips the trial; ``--deterministic`` runs train without XLA: a fixed choice, so that resuming stays
bit-identical, and XLA has no deterministic form of some ops (MaxPooling's gradient:
``--jit on --deterministic`` is refused). Only the step is compiled by XLA, inside chunkfit's
multi-batch loop: XLA over the whole loop ran slower.
"""

from __future__ import annotations

from typing import Any

# The modes of the trial elements, in order: XLA's first element compiles and is not counted.
TRIALS = (False, True, False, True, False, True)
XLA_MARGIN = 1.10  # how much faster than the step without XLA the trial must time XLA's
MIN_ELEMENTS = (
    16  # the trial is 6 of them; on baseline-cnn XLA repaid its compile within about 10 (2 cores)
)


class JitChoice:
    """Which mode trains the next element, and what was measured; ``decided`` once it is known."""

    def __init__(
        self,
        mode: str,
        deterministic: bool,
        run_elements: int,
        steps: int,
        measured: bool | None = None,
    ) -> None:
        self.timings: dict[bool, list[float]] = {False: [], True: []}
        self.at = 0
        self.compiled = False
        if mode in ("on", "off"):
            self.jit: bool | None = mode == "on"
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
                f"autotune: a run of {run_elements} training calls of up to {steps} batches is too short to try XLA",
            )
        else:
            self.jit, self.by = None, "autotune"

    @property
    def decided(self) -> bool:
        return self.jit is not None

    def next_mode(self) -> bool:
        """The mode for the next element (trial modes until decided)."""
        return self.jit if self.jit is not None else TRIALS[self.at]

    def timed(self, jit: bool, seconds: float, batches: int) -> None:
        """The element just trained in mode ``jit`` took ``seconds`` for ``batches`` batches."""
        if self.jit is not None:
            return
        if jit and not self.compiled:  # its first element compiled it
            self.compiled = True
        else:
            self.timings[jit].append(seconds / max(batches, 1))
        self.at += 1
        if self.at == len(TRIALS):
            self.jit = min(self.timings[True]) * XLA_MARGIN < min(self.timings[False])

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
            timed = f" (without XLA {rates.get('graph', 0):,.0f}, XLA {rates.get('xla', 0):,.0f} windows/s)"
        used = "under XLA" if self.jit else "without XLA"
        return f"train step {used}, chosen by {self.by}{timed}"
