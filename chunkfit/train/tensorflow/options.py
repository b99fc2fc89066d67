"""What the TensorFlow engine refuses of ``FitOptions``, checked before TensorFlow loads."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...errors import UsageError

if TYPE_CHECKING:
    from ...config import FitOptions


def check_options(opts: FitOptions) -> None:
    """Refuse the options of other engines, in one line."""
    if opts.jax_loop != "auto":
        raise UsageError(
            f"--jax-loop {opts.jax_loop} is for the JAX engine (TensorFlow loops its batches in "
            "its own compiled call); leave it out, or train on JAX (--backend jax)"
        )
