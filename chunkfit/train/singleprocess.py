"""``SingleProcessEngine``: what every engine does alike when it trains in one process on one
device.

The training loop asks each engine these questions (chunkfit.train.engines.Engine); only several
workers or devices (chunkfit.train.tensorflow.distributed) answer them otherwise.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from .metrics import with_f1


class Checkpointed(Protocol):
    """A checkpoint as workers compare theirs: by its sequence number."""

    @property
    def sequence(self) -> int: ...


C = TypeVar("C", bound=Checkpointed)


class SingleProcessEngine:
    """Defaults for an engine with a ``model`` and a ``normalizer``, in one process on one
    device."""

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

    def rendezvous(
        self,
        identity: dict[str, Any],
        where: str | None,
        latest: Callable[[], C | None],
        *,
        write: Callable[[str, str], None] | None = None,
        read: Callable[[str], str | None] | None = None,
        remove: Callable[[str], None] | None = None,
    ) -> C | None:
        """One process meets no one: the checkpoint to resume from is ``latest()``."""
        return latest()

    def distribution_info(self) -> dict[str, Any] | None:
        """The run's distribution for run.json (None: one process, one device)."""
        return None

    def epoch_shares(self, groups: list[int]) -> list[list[dict[str, Any]]] | None:
        """Each replica's share of an epoch's trained groups of ``groups`` windows (None: one
        replica)."""
        return None

    def finish(self) -> None:
        """After the run is written: several workers leave together."""

    def metrics(self) -> dict[str, float]:
        """The model's metric results now, as Python floats, F1 added and the event class first."""
        import numpy as np

        logs: dict[str, Any] = self.model.get_metrics_result()
        return with_f1({k: float(np.asarray(v)) for k, v in logs.items()})
