"""What scores a store: a run's Keras model on the engine of Keras's backend, or an exported model
in its own runtime (chunkfit.score.exported), behind one ``Scorer``.

Evaluate, predict and predict --follow hold a ``Scorer`` and never ask which it is: the run's
settings (``spec``), the compiled scoring function (``predictor``) and, for a dense picker, the
pick width.
"""

from __future__ import annotations

import dataclasses
import math
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
    ceiling: float | None = None  # the highest score an integer output can give

    def threshold_source(self, threshold: float, source: str) -> str:
        """Where the threshold came from, and whether this model's scores can reach it: an int8
        output scaled by 1/256 stops at 255/256, under a threshold the float run may have chosen."""
        if self.ceiling is None or threshold <= self.ceiling:
            return source
        below = math.floor(self.ceiling * 1e4) / 1e4
        return (
            f"{source}; above {self.ceiling:.6g}, the highest score this quantised model gives, so "
            f"nothing fires: pass --threshold {below:g} or lower"
        )


def load_scorer(run: str | os.PathLike[str], *, unsafe: bool, batch_size: int) -> Scorer:
    """The scoring function of ``run`` (a run folder, a ``.keras`` file or an exported model)."""
    files = locate_run(run, unsafe=unsafe)
    if files.sidecar is not None:
        from .exported import load_exported

        spec, exported, line = load_exported(files, batch_size)
        width = pick_width(spec, exported.per_sample)
        return Scorer(spec, exported, width, line, exported.ceiling)
    model, spec = load_run(run, unsafe=unsafe)
    predictor = make_predictor(model, spec.windows.window, spec.n_channels, batch_size)
    return Scorer(spec, predictor, run_pick_width(model, spec))
