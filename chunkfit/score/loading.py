"""What scores a store: a run's Keras model on the engine of Keras's backend, or an exported model
in its own runtime (chunkfit.score.exported), behind one ``Scorer``.

Evaluate, predict and predict --follow hold a ``Scorer`` and never ask which it is: the run's
settings (``spec``), the compiled scoring function (``predictor``) and, for a dense picker, the
pick width.
"""

from __future__ import annotations

import dataclasses
import os

from ..core.scoring import Predictor
from .picks import pick_width, run_pick_width
from .runs import RunSpec, load_run, locate_run
from .scorer import make_predictor


@dataclasses.dataclass(frozen=True)
class Scorer:
    spec: RunSpec
    predictor: Predictor
    width: int | None  # the pick width of a dense picker, None for a classifier
    exported: str | None = None  # "model.tflite (LiteRT int8)" for an exported model


def load_scorer(run: str | os.PathLike[str], *, unsafe: bool, batch_size: int) -> Scorer:
    """The scoring function of ``run`` (a run folder, a ``.keras`` file or an exported model)."""
    files = locate_run(run, unsafe=unsafe)
    if files.sidecar is not None:
        from .exported import load_exported

        spec, exported, line = load_exported(files, batch_size)
        return Scorer(spec, exported, pick_width(spec, exported.per_sample), line)
    model, spec = load_run(run, unsafe=unsafe)
    predictor = make_predictor(model, spec.windows.window, spec.n_channels, batch_size)
    return Scorer(spec, predictor, run_pick_width(model, spec))
