"""The original question's dummy problem, written straight into a store in bounded memory.

x[i] = sin(i) + Normal(0, 0.2), plus 0.5 at ``anomalies`` distinct random positions, which are
also stored as event markers. A window is class 1 when it holds at least one of them. ``scale`` and
``offset`` write ``scale * x + offset`` instead: the same problem in a sensor's raw units.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from .config import ConfigBase
from .errors import UsageError
from .store.layout import check_store_path
from .store.writer import StoreWriter

DEFAULT_SAMPLES = 1_049_344
DEFAULT_ANOMALIES = 50_000


@dataclasses.dataclass(frozen=True)
class SynthSpec(ConfigBase):
    """Parameters of the dummy problem."""

    samples: int = DEFAULT_SAMPLES
    anomalies: int = DEFAULT_ANOMALIES
    seed: int = 0
    noise: float = 0.2
    bump: float = 0.5
    sample_rate: float = 1.0
    scale: float = 1.0
    offset: float = 0.0

    def __post_init__(self) -> None:
        if self.samples < 1:
            raise UsageError(f"--samples must be positive (received {self.samples})")
        if not (0 <= self.anomalies <= self.samples):
            raise UsageError(
                f"--anomalies must be between 0 and --samples={self.samples} (received "
                f"{self.anomalies})"
            )
        if self.seed < 0:
            raise UsageError(f"--seed must be non-negative (received {self.seed})")


def balanced_anomalies(samples: int, window: int) -> int:
    """Anomaly count that makes about half the windows positive: (1 - M/N)**window = 1/2."""
    return int(round(samples * (1.0 - 0.5 ** (1.0 / window))))


def anomaly_positions(spec: SynthSpec) -> np.ndarray:
    """Sorted distinct anomaly positions, a pure function of the spec."""
    rng = np.random.default_rng([spec.seed, 1])
    return np.sort(rng.choice(spec.samples, size=spec.anomalies, replace=False)).astype(np.int64)


def synth(
    path: str | os.PathLike[str],
    spec: SynthSpec | None = None,
    *,
    block: int = 1 << 20,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Write the dummy problem to a new store at ``path``; returns the store's info summary."""
    spec = spec or SynthSpec()
    check_store_path(os.fspath(path))
    events = anomaly_positions(spec)
    with StoreWriter(
        path, channels=["x"], sample_rate=spec.sample_rate, has_labels=False, append=False
    ) as w:
        for k, a in enumerate(range(0, spec.samples, block)):
            b = min(a + block, spec.samples)
            rng = np.random.default_rng([spec.seed, 2, k])
            x = np.sin(np.arange(a, b, dtype=np.float64)) + rng.normal(0.0, spec.noise, b - a)
            hit = events[np.searchsorted(events, a) : np.searchsorted(events, b)]
            x[hit - a] += spec.bump
            w.write((spec.scale * x + spec.offset).astype(np.float32)[:, None])
            if progress is not None:
                progress(b, spec.samples)
        w.add_segment(0, spec.samples)
        w.add_events(events)
        w.add_source(
            {
                "name": f"synth:{json_spec(spec)}",
                "size": spec.samples * 4,
                "rows": spec.samples,
                "sha256": None,
                "synth": spec.to_dict(),
            }
        )
        w.commit()
    from .store.reader import Store

    with Store(path) as s:
        return s.info()


def json_spec(spec: SynthSpec) -> str:
    return ",".join(
        f"{k}={v}"
        for k, v in spec.to_dict().items()
        if not (isinstance(v, float) and math.isnan(v))
    )
