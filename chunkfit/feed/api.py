"""``chunkfit.blocks`` and ``chunkfit.dataset``: chunkfit's windows for a loop it does not own.

Both take the settings of ``chunkfit.fit`` that choose and label windows, and plan them with
train's own code (chunkfit.feed.source), so a custom loop and ``chunkfit train`` with the same
settings see the same training and validation windows. Each adapter's library is imported only when
that kind is asked for.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import Any

from ..config import BlockSpec, SplitSpec, WindowSpec
from ..errors import MissingExtraError, UsageError
from ..store import Store
from .blocks import Blocks
from .source import Feed, fit_options

# kind -> (library, extra); TensorFlow is one of chunkfit's own dependencies
KINDS: dict[str, tuple[str, str] | None] = {
    "tf": None,
    "torch": ("torch", "torch"),
    "grain": ("grain", "grain"),
}


# the settings of chunkfit.fit that choose and label windows (chunkfit.feed.source.fit_options)
CHOOSING = (
    "window",
    "stride",
    "chunk",
    "seed",
    "mix",
    "validation",
    "validation_segments",
    "label",
    "label_margin",
    "normalize",
    "class_weight",
    "oversample",
    "shuffle",
)


def _feed(store: Store | str | os.PathLike[str], given: dict[str, Any]) -> Feed:
    """The feed of the settings in ``given``, the ``locals()`` of ``blocks`` or ``dataset``."""
    opts = fit_options(**{k: given[k] for k in CHOOSING})
    return Feed(store, opts, split=given["split"], labels=given["labels"])


def blocks(
    store: Store | str | os.PathLike[str],
    *,
    window: int = WindowSpec.window,
    stride: int = WindowSpec.stride,
    chunk: int = BlockSpec.chunk,
    split: str = "train",
    seed: int = BlockSpec.seed,
    epoch: int = 0,
    epochs: int = 1,
    mix: int = 1,
    validation: float = SplitSpec.validation,
    validation_segments: float | None = SplitSpec.segments,
    label: str = WindowSpec.label,
    label_margin: int = WindowSpec.margin,
    normalize: str = "global",
    class_weight: str = "auto",
    oversample: float = 0.0,
    shuffle: bool = True,
    labels: str = "onehot",
    prefetch: bool = True,
) -> Blocks:
    """The ``split`` ("train" or "validation") of ``store`` as ``(x, y, sample_weight)`` numpy
    arrays, a group of ``mix`` blocks of ``chunk`` windows at a time, epochs ``epoch`` ..
    ``epoch + epochs - 1`` in ``chunkfit train``'s order for ``seed``.

    ``x`` is float32 [n, window, channels], standardised per ``normalize`` (global, window, none:
    statistics of the training split); ``y`` one-hot float32 [n, classes] or, with ``labels="int"``,
    int32 class indices [n]; ``sample_weight`` float32 [n] by ``class_weight`` (auto, balanced,
    balanced:max=M, none, 0:1,1:40), or None when unweighted and for validation. The other settings
    mean what they mean for ``chunkfit.fit``. ``get_state()``/``set_state()`` save and resume the
    position. ``for x, y, w in chunkfit.blocks(...): model.fit(x, y, sample_weight=w)`` trains each
    training window once per epoch.
    """
    feed = _feed(store, locals())
    return Blocks(feed, epoch=epoch, epochs=epochs, prefetch=prefetch)


def dataset(
    store: Store | str | os.PathLike[str],
    *,
    kind: str = "tf",
    batch_size: int = 128,
    window: int = WindowSpec.window,
    stride: int = WindowSpec.stride,
    chunk: int = BlockSpec.chunk,
    split: str = "train",
    seed: int = BlockSpec.seed,
    epoch: int = 0,
    epochs: int = 1,
    mix: int = 1,
    validation: float = SplitSpec.validation,
    validation_segments: float | None = SplitSpec.segments,
    label: str = WindowSpec.label,
    label_margin: int = WindowSpec.margin,
    normalize: str = "global",
    class_weight: str = "auto",
    oversample: float = 0.0,
    shuffle: bool = True,
    labels: str = "onehot",
    rank: int | None = None,
    world_size: int | None = None,
) -> Any:
    """The windows of ``chunkfit.blocks`` as the dataset of ``kind``, in batches of
    ``batch_size`` (a block's last batch may be shorter):

    - ``tf``: a ``tf.data.Dataset`` of ``(x, y[, sample_weight])`` for ``model.fit``; each pass over
      it is the next epoch, from ``epoch`` (Keras's ``fit(ds, epochs=E)`` sees E shuffles); the
      windows are gathered from the blocks' raw samples inside the input graph;
    - ``torch``: a ``torch.utils.data.IterableDataset`` of ``(x, y, sample_weight)`` tensors,
      already batched (``DataLoader(ds, batch_size=None, num_workers=...)``), the blocks shared
      out between the loader's workers and ``rank`` of ``world_size`` (default: torch.distributed's,
      when initialised) without overlap; ``set_epoch(e)`` picks the epoch's order;
    - ``grain``: a ``grain.MapDataset`` of the batches of epochs ``epoch`` .. ``epoch + epochs -
      1``; its iterator's ``get_state``/``set_state`` resume it.

    ``sample_weight`` is left out (tf) or None where ``chunkfit.blocks`` has none.
    """
    if kind not in KINDS:
        raise UsageError(f"kind must be one of {', '.join(KINDS)} (received {kind!r})")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise UsageError(f"batch_size must be a positive integer (received {batch_size!r})")
    needs = KINDS[kind]
    if needs is not None:
        _require(*needs)
    feed = _feed(store, locals())
    if kind == "tf":
        from .tfdata import tf_dataset

        return tf_dataset(feed, batch_size=batch_size, epoch=epoch)
    if kind == "torch":
        from .torchdata import WindowDataset

        return WindowDataset(
            feed, batch_size=batch_size, epoch=epoch, rank=rank, world_size=world_size
        )
    from .graindata import grain_dataset

    return grain_dataset(feed, batch_size=batch_size, epoch=epoch, epochs=epochs)


def _require(library: str, extra: str) -> ModuleType:
    """Import an adapter's library, or say which extra installs it."""
    try:
        return importlib.import_module(library)
    except ImportError:
        raise MissingExtraError(
            f"chunkfit.dataset(kind=...) needs the {library} package; install it with "
            f"pip install 'chunkfit[{extra}]'"
        ) from None
