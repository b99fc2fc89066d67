"""chunkfit: train Keras models on sensor signals far larger than memory.

Heavy parts (TensorFlow) load only when a training, evaluation or prediction name is first used,
so ``import chunkfit`` and the data commands stay fast.
"""

from __future__ import annotations

import importlib
from typing import Any

from . import errors
from ._version import __version__ as __version__

# bench, ingest and synth share their names with the modules that define them. Bound here, at
# import, they stay the functions: bound lazily, a later ``import chunkfit.ingest.<module>`` would
# leave the module in their place. None of the three loads TensorFlow.
from .bench import BenchSpec, bench
from .config import (
    AugmentSpec,
    BlockSpec,
    FitOptions,
    FollowOptions,
    IngestOptions,
    SplitSpec,
    WindowSpec,
)
from .errors import ChunkfitError
from .ingest import IngestReport, ingest
from .store import Store, StoreWriter, open_store
from .synth import SynthSpec, synth

# name -> module that defines it, imported on first use
_LAZY: dict[str, str] = {
    "evaluate": ".score.evaluate",
    "predict": ".score.predict",
    "PredictReport": ".score.predict",
    "follow": ".score.follow",
    "FollowReport": ".score.follow",
    "fit": ".train.fit",
    "TrainProgress": ".train.progress",
    "build_model": ".train.models",
    "blocks": ".feed.api",
    "dataset": ".feed.api",
}

__all__ = [
    "AugmentSpec",
    "BenchSpec",
    "BlockSpec",
    "ChunkfitError",
    "FitOptions",
    "FollowOptions",
    "IngestOptions",
    "IngestReport",
    "SplitSpec",
    "Store",
    "StoreWriter",
    "SynthSpec",
    "WindowSpec",
    "bench",
    "errors",
    "ingest",
    "open_store",
    "synth",
    *sorted(_LAZY),
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'chunkfit' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
