"""The engine interface and its registry: what the training loop and the scorer ask of an engine,
and which engine a process uses.

An engine owns the model's runtime: starting it (threads, seeds, determinism), building and
compiling the model, turning a group of blocks into the runtime's tensors (in the loader thread),
and training or evaluating one group. The loop (chunkfit.train.loop) owns epochs, block order,
callbacks and checkpoints, holds an ``Engine`` and never asks which one. A ``Predictor`` scores
blocks of windows for chunkfit.score.

Keras picks its backend once per process (chunkfit.train.backend); ``engine_for_backend`` returns
that backend's ``EngineEntry``. A third engine is a package beside ``tensorflow/`` and ``jax/``
holding an ``Engine``, a ``Predictor`` and an option check, and one line in ``ENGINES`` (and its
name in ``chunkfit.train.backend.BACKENDS``). Importing this module loads neither TensorFlow nor
JAX: the entries import their engine when asked.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from ..core.scoring import Predictor
from .backend import BACKENDS, keras_backend
from .singleprocess import C

if TYPE_CHECKING:
    import keras

    from ..config import FitOptions
    from .blocks import BlockData
    from .normalize import Normalizer
    from .steps import Shapes


class Engine(Protocol):
    """A started engine with a built, compiled model: what the training loop calls, in order."""

    name: str
    """The engine's name in run.json (``engine``)."""
    model: keras.Model
    """The model being trained (behind no normalisation: it takes standardised windows)."""
    shapes: Shapes
    """The run's window, channels and classes."""
    steps: int
    """Batches per training element (one compiled call; ``--steps-per-execution``)."""

    def in_flight_bytes(self) -> int:
        """Memory of what trains beside the blocks (for ``--memory-budget``)."""
        ...

    def pad_groups_to(self, group_samples: int) -> None:
        """The most samples a training group holds (chunkfit.train.plan): every training group is
        padded to it, so that the compiled step sees one shape all run."""
        ...

    def choose_compile(self, run_batches: int) -> None:
        """Decide (or set up the trial that decides) how the train step is compiled, for a run of
        ``run_batches`` training batches."""
        ...

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
        """Before training, with several workers: check that every worker runs the same run
        (``identity``) and reads the run folder ``where`` the chief writes (``write``, ``read``,
        ``remove`` a probe file there), then return ``latest()``, the checkpoint to resume from,
        refused unless every worker found the same one. In one process: ``latest()``."""
        ...

    def tensors(self, data: BlockData, training: bool) -> Any:
        """A group's samples, offsets and classes as the engine trains (or evaluates) them; runs
        in the loader thread. The result has ``n_windows`` and ``n_blocks``."""
        ...

    def prepare(self) -> None:
        """Compile or build what the first step needs; called while the first group loads."""
        ...

    def step_batches(self, n_windows: int) -> list[int]:
        """Batches in each training element of a group of ``n_windows`` (callbacks' batch
        numbers)."""
        ...

    def train(self, tensors: Any, callbacks: keras.callbacks.CallbackList) -> None:
        """Train one group from ``tensors``, with Keras's batch events to ``callbacks``."""
        ...

    def evaluate(self, tensors: Any, callbacks: keras.callbacks.CallbackList) -> None:
        """Evaluate one group from ``tensors``; the model's metrics hold its totals."""
        ...

    def metrics(self) -> dict[str, float]:
        """The model's metric results now, as Python floats, F1 added."""
        ...

    @property
    def fit_wrapper(self) -> keras.Model | None:
        """The model whose ``fit`` trains the blocks when it wraps ``model`` (a callback that
        stops ``model`` stops it too), else None."""
        ...

    def exported(self) -> keras.Model:
        """The trained model behind the run's normalisation: the model that takes raw signal."""
        ...

    def scope(self) -> contextlib.AbstractContextManager[Any]:
        """Where the model's variables are created and restored (a strategy's scope)."""
        ...

    def lost_worker(self) -> contextlib.AbstractContextManager[Any]:
        """Turns another worker's loss into one line (several workers only)."""
        ...

    def threads_info(self) -> dict[str, Any]:
        """The threads in effect and how they were chosen, for run.json."""
        ...

    def compile_info(self) -> dict[str, Any]:
        """How the train step is compiled, for run.json."""
        ...

    def compile_line(self) -> str | None:
        """The run's one line on how it trains, once decided (None until then, or never)."""
        ...

    def compile_summary(self) -> str | None:
        """``compile_line`` in a few words (engine, compile mode, threads), for a narrow terminal;
        ``compile_line`` and run.json keep the reasons and timings."""
        ...

    def distribution_info(self) -> dict[str, Any] | None:
        """The run's workers, devices and replicas for run.json (None: one process, one device)."""
        ...

    def epoch_shares(self, groups: list[int]) -> list[list[dict[str, Any]]] | None:
        """Each replica's share of an epoch's trained groups of ``groups`` windows (None: one
        replica)."""
        ...

    def finish(self) -> None:
        """After the run is written: several workers leave together."""
        ...


class EngineClass(Protocol):
    """How an engine starts in one process."""

    def start(
        self,
        model: keras.Model | str,
        opts: FitOptions,
        shapes: Shapes,
        normalizer: Normalizer,
        class_weights: tuple[float, ...] | None = None,
        run_windows: int = 0,
        group_samples: int = 0,
        say: Callable[[str], None] | None = None,
    ) -> Engine:
        """Start the runtime, seed it, build and compile ``model`` for windows of ``shapes``
        standardised by ``normalizer`` and weighted by ``class_weights``. ``run_windows`` and
        ``group_samples`` size the run (for measurements); ``say`` hears what takes a while."""
        ...


class DistributedEngineClass(Protocol):
    """How an engine starts on several devices or workers."""

    def start_distributed(
        self,
        model: keras.Model | str,
        opts: FitOptions,
        shapes: Shapes,
        normalizer: Normalizer,
        class_weights: tuple[float, ...] | None,
        cluster: Any,
        devices: str | None,
    ) -> Engine:
        """As ``EngineClass.start``, on the workers of ``cluster`` (None: this machine) and the
        ``devices`` of this machine."""
        ...


@dataclasses.dataclass(frozen=True)
class EngineEntry:
    """One engine in the registry; its parts are imported when asked for."""

    name: str
    engine: Callable[[], EngineClass]
    predictor: Callable[[keras.Model, int, int, int], Predictor]
    check: Callable[[FitOptions], None]
    """Refuses, in one line and before anything loads, the options this engine cannot honour."""
    distributed: Callable[[], DistributedEngineClass] | None = None
    """The engine on several devices or workers; None: it trains in one process only."""


def _tensorflow_engine() -> EngineClass:
    from .tensorflow.engine import TensorFlowEngine

    return TensorFlowEngine


def _tensorflow_distributed() -> DistributedEngineClass:
    from .tensorflow.distributed import DistributedEngine

    return DistributedEngine


def _tensorflow_predictor(
    model: keras.Model, window: int, n_channels: int, batch_size: int
) -> Predictor:
    from .tensorflow.predictor import Predictor as TensorFlowPredictor

    return TensorFlowPredictor(model, window, n_channels, batch_size)


def _tensorflow_check(opts: FitOptions) -> None:
    from .tensorflow.options import check_options

    check_options(opts)


def _jax_engine() -> EngineClass:
    from .jax.engine import JaxEngine

    return JaxEngine


def _jax_predictor(model: keras.Model, window: int, n_channels: int, batch_size: int) -> Predictor:
    from .jax.predictor import Predictor as JaxPredictor

    return JaxPredictor(model, window, n_channels, batch_size)


def _jax_check(opts: FitOptions) -> None:
    from .jax.options import check_options

    check_options(opts)


ENGINES: dict[str, EngineEntry] = {
    "tensorflow": EngineEntry(
        "tensorflow",
        _tensorflow_engine,
        _tensorflow_predictor,
        _tensorflow_check,
        _tensorflow_distributed,
    ),
    "jax": EngineEntry("jax", _jax_engine, _jax_predictor, _jax_check),
}
assert tuple(ENGINES) == BACKENDS, "every Keras backend chunkfit accepts has one engine"


def engine_for_backend() -> EngineEntry:
    """The engine of the Keras backend this process runs (or will run): chunkfit.train.backend."""
    return ENGINES[keras_backend()]
