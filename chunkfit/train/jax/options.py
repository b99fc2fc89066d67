"""What the JAX engine refuses of ``FitOptions``, checked before JAX loads."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...errors import UsageError

if TYPE_CHECKING:
    from ...config import FitOptions


def check_options(opts: FitOptions) -> None:
    """Refuse what the JAX engine cannot do, in one line each, before anything trains."""
    if opts.jit == "off":
        raise UsageError(
            "--jit off: the JAX engine compiles every step with XLA; leave out --jit, or train on "
            "TensorFlow (KERAS_BACKEND=tensorflow)"
        )
    if opts.compute_threads is not None:
        raise UsageError(
            "--compute-threads is for the TensorFlow engine (XLA on JAX uses every core); leave it "
            "out, or train on TensorFlow (KERAS_BACKEND=tensorflow)"
        )
