"""``OneProcess``: what every engine does alike when it trains in one process on one device.

The training loop asks each engine these questions; only several workers or devices
(chunkfit.train.tensorflow.distributed) answer them otherwise.
"""

from __future__ import annotations

import contextlib
from typing import Any

from .metrics import with_f1


class OneProcess:
    """Defaults for an engine with a ``model`` and a ``normalizer``, in one process on one device."""

    model: Any
    normalizer: Any

    def exported(self) -> Any:
        """The trained model behind the run's normalisation: the model that takes raw signal."""
        return self.normalizer.wrap(self.model)

    def scope(self) -> contextlib.AbstractContextManager[Any]:
        """Where the model's variables live: the strategy's scope with several devices."""
        return contextlib.nullcontext()

    def lost_worker(self) -> contextlib.AbstractContextManager[Any]:
        """Turns another worker's loss into one line (several workers only)."""
        return contextlib.nullcontext()

    def about(self) -> dict[str, Any] | None:
        """The run's distribution for run.json (None: one process, one device)."""
        return None

    def epoch_shares(self, groups: list[int]) -> list[list[dict[str, Any]]] | None:
        """Each replica's share of an epoch's trained groups of ``groups`` windows (None: one replica)."""
        return None

    def finish(self) -> None:
        """After the run is written: several workers leave together."""

    def metrics(self) -> dict[str, float]:
        """The model's metric results now, as Python floats, F1 added and the event class first."""
        import numpy as np

        logs: dict[str, Any] = self.model.get_metrics_result()
        return with_f1({k: float(np.asarray(v)) for k, v in logs.items()})
