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
    """The feed of the settings in ``given``, the ``locals()`` of ``blocks`` or ``dataset``;
    a validation split that holds no window is refused rather than yielding nothing."""
    _check_epochs(given["epoch"], given["epochs"])
    opts = fit_options(**{k: given[k] for k in CHOOSING})
    feed = Feed(store, opts, split=given["split"], labels=given["labels"])
    if not feed.training and feed.epoch_windows() == 0:
        feed.close()
        raise UsageError(
            f"split='validation' holds no windows (received validation={given['validation']}, "
            f"validation_segments={given['validation_segments']}); pass validation > 0 or "
            "validation_segments"
        )
    return feed


def _check_epochs(epoch: int, epochs: int) -> None:
    if epoch < 0:
        raise UsageError(f"epoch must be >= 0 (received epoch={epoch})")
    if epochs < 1:
        raise UsageError(f"epochs must be >= 1 (received epochs={epochs})")


def _check_kind(kind: str, epochs: int, rank: int | None, world_size: int | None) -> None:
    """Refuse the settings ``kind`` does not use, rather than ignore them."""
    if kind not in KINDS:
        raise UsageError(f"kind must be one of {', '.join(KINDS)} (received {kind!r})")
    if epochs != 1 and kind == "tf":
        raise UsageError(
            f"kind='tf' takes no epochs: each pass over the dataset is the next epoch "
            f"(received epochs={epochs}); use model.fit(ds, epochs={epochs})"
        )
    if epochs != 1 and kind == "torch":
        raise UsageError(
            f"kind='torch' takes no epochs: each pass yields epoch set_epoch(e) chose "
            f"(received epochs={epochs}); call ds.set_epoch(e) before each pass"
        )
    if kind != "torch" and (rank is not None or world_size is not None):
        raise UsageError(
            f"rank and world_size are for kind='torch' (received rank={rank}, "
            f"world_size={world_size}, kind={kind!r}); leave them out"
        )


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

    An epoch holds the windows ``chunkfit train`` trains whatever ``mix``; their order is train's
    only with train's ``mix``: the default here is 1, train's is 4 (``BlockSpec.mix``), so pass
    ``mix=4`` to follow a run's order. The iterator's end closes a store it opened from a path.
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

    - ``tf``: a ``tf.data.Dataset`` of ``(x, y[, sample_weight])`` for ``model.fit``; each iterator
      taken from it is the next epoch, from ``epoch`` (Keras's ``fit(ds, epochs=E)`` sees E
      shuffles; a ``next(iter(ds))`` peek uses up an epoch too); the windows are gathered from the
      blocks' raw samples inside the input graph; with ``mix`` > 1 and shuffling, batches run on
      across groups so that every epoch has as many (chunkfit.feed.tfdata);
    - ``torch``: a ``torch.utils.data.IterableDataset`` of ``(x, y, sample_weight)`` tensors,
      already batched (``DataLoader(ds, batch_size=None, num_workers=...)``), the blocks shared
      out between the loader's workers and ``rank`` of ``world_size`` (default: torch.distributed's,
      when initialised) without overlap; ``set_epoch(e)`` picks the epoch's order (it does not
      reach a ``DataLoader``'s ``persistent_workers``, which keep the first epoch's copy);
    - ``grain``: a ``grain.MapDataset`` of the batches of epochs ``epoch`` .. ``epoch + epochs -
      1``; its iterator's ``get_state``/``set_state`` resume it.

    ``sample_weight`` is left out (tf) or None where ``chunkfit.blocks`` has none. ``epochs`` is
    grain's alone (tf and torch give an epoch per pass) and ``rank``/``world_size`` torch's: given
    to another kind they are refused. As with ``chunkfit.blocks``, the order is ``chunkfit
    train``'s only with its ``mix`` (4; the default here is 1).
    """
    _check_kind(kind, epochs, rank, world_size)
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
