"""A choice between two ways of running the train step, made by timing both in the run itself.

Both engines choose this way (TensorFlow: the step without XLA or under it,
chunkfit.train.tensorflow.autotune; JAX: one call per batch or a loop inside one call,
chunkfit.train.jax.loopchoice). The first training elements of the run alternate between the two
modes (``TRIALS``), each timed, and the faster trains the rest. The trial elements are real
training (each window still trained once, by one mode or the other), so what the trial costs is
the second mode's compile and the slower mode's share of ``TRIALS`` elements; a run of fewer than
``MIN_ELEMENTS`` elements, too short to pay for that, takes a fixed default. Timings are per batch
and the best of each mode's counts, so a moment of load elsewhere on the machine does not decide.
The second mode must beat the first by ``MARGIN``: the trial's elements flatter it against whole
epochs, and a close call is not worth a slower run.
"""

from __future__ import annotations

# The modes of the trial elements, in order (True: the second mode, whose first element compiles
# it and is not counted).
TRIALS = (False, True, False, True, False, True)
MARGIN = 1.10  # how much faster than the first mode the trial must time the second
MIN_ELEMENTS = 16  # the trial is 6 of them; a second mode must repay its compile in the rest


class TwoModeTrial:
    """Which mode trains the next element, and what was measured; ``decided`` once it is known.

    ``jit`` is the chosen mode (True: the second), None while the trial runs; ``by`` says who
    chose it. Subclasses set both where the choice needs no trial.
    """

    def __init__(self) -> None:
        self.timings: dict[bool, list[float]] = {False: [], True: []}
        self.at = 0
        self.compiled = False
        self.jit: bool | None = None
        self.by = "autotune"

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
            self.jit = min(self.timings[True]) * MARGIN < min(self.timings[False])
