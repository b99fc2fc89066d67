"""How the JAX engine runs an element's batches, chosen by timing both on this machine, for this
model.

``dispatch`` calls the compiled step once per batch from Python; ``scan`` loops an element's
batches inside one compiled call (chunkfit.train.jax.steps). Which is faster depends on how long
a step takes against a call's dispatch: on a CPU a small model's step runs slower inside the loop,
on a GPU a step is shorter than its dispatch and the loop is much faster. So under
``--jax-loop auto`` (the default) the first full elements of the run alternate between the two,
each timed on its first batches (the scan's first element compiles it and is not counted), and
the faster trains the rest: the same trial, and the same rule for a run too short to pay for it,
as TensorFlow's XLA trial (chunkfit.train.trial), and a bound: the trial runs only where it costs
under 5% of the run (TRIAL_SECONDS), judged from its first timing; a shorter run takes the default
for where JAX computes (scan on a GPU or TPU, dispatch on a CPU). ``--jax-loop dispatch|scan``
skips the trial; ``--deterministic`` runs dispatch: a fixed choice, so that a resumed run is
bit-identical.
"""

from __future__ import annotations

from typing import Any

from ..trial import MIN_ELEMENTS, TwoModeTrial

# What the trial may cost a run (about the scan's compile; the slower mode's batches cost little):
# it is tried only when this is under 5% of the run's estimated time.
TRIAL_SECONDS = 2.0


class LoopChoice(TwoModeTrial):
    """The trial with the JAX engine's two modes: True is ``scan``, False ``dispatch``.

    ``accelerator``: JAX computes on a GPU or TPU, where the scan is the default for a run too short
    for the trial (dispatch on a CPU). ``run_batches`` sizes the run for the trial's bound.
    """

    def __init__(
        self,
        mode: str,
        deterministic: bool,
        run_elements: int,
        steps: int,
        *,
        accelerator: bool = False,
        run_batches: int = 0,
    ) -> None:
        super().__init__()
        self.accelerator, self.run_batches = accelerator, run_batches
        if mode in ("dispatch", "scan"):
            self.jit, self.by = mode == "scan", f"--jax-loop {mode}"
        elif deterministic:
            self.jit, self.by = (
                False,
                "--deterministic (a fixed choice keeps a resumed run bit-identical)",
            )
        elif run_elements < MIN_ELEMENTS:
            self._default(f"a run of {run_elements} training calls of up to {steps} batches")

    def timed(self, jit: bool, seconds: float, batches: int) -> None:
        """As ``TwoModeTrial.timed``; after the first timing, a run estimated too short to pay for
        the trial (TRIAL_SECONDS over 5% of it) stops it and takes the default."""
        super().timed(jit, seconds, batches)
        first = not self.decided and sum(map(len, self.timings.values())) == 1 and self.at == 1
        if first:
            estimate = self.run_batches * seconds / max(batches, 1)
            if TRIAL_SECONDS > 0.05 * estimate:
                self._default(f"a run of about {estimate:.0f} s")

    def _default(self, run: str) -> None:
        """No trial for ``run``: the default for where JAX computes."""
        where = "an accelerator" if self.accelerator else "a CPU"
        self.jit, self.by = (
            self.accelerator,
            f"autotune: {run} is too short to try both loops; the default on {where}",
        )

    @property
    def mode(self) -> str | None:
        return None if self.jit is None else ("scan" if self.jit else "dispatch")

    def to_dict(self, batch_size: int) -> dict[str, Any]:
        out: dict[str, Any] = {"jit": True, "loop": self.mode, "by": self.by}
        if self.by == "autotune":
            out["windows_per_s"] = {
                ("scan" if mode else "dispatch"): round(batch_size / min(t), 1)
                for mode, t in self.timings.items()
                if t
            }
        return out

    def describe(self, batch_size: int) -> str:
        rates = self.to_dict(batch_size).get("windows_per_s", {})
        timed = ""
        if rates:
            dispatch, scan = rates.get("dispatch", 0), rates.get("scan", 0)
            timed = f" (dispatch {dispatch:,.0f}, scan {scan:,.0f} windows/s)"
        how = "looped inside one compiled call" if self.jit else "one compiled call each"
        return f"an element's batches {how} (--jax-loop {self.mode}), chosen by {self.by}{timed}"
