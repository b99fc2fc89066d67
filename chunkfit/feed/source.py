"""A store's windows as ``chunkfit train`` sees them, for a loop chunkfit does not own.

A ``Feed`` is one store under one set of training options: the split, the labels, the blocks and
their seeded order (chunkfit.core.plan), the normalisation of the training split
(chunkfit.train.normalize) and the class weights (chunkfit.train.weights), each made by the very
code ``chunkfit train`` runs. The iterator (chunkfit.feed.blocks) and the adapters for tf.data,
PyTorch and Grain read their blocks through it.

A feed pickles without its open store: a copy in another process (a DataLoader worker, a Grain
worker) opens the store again by its location and keeps the parent's statistics.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ..config import FitOptions
from ..core.blocks import Block, BlockData
from ..core.plan import SplitPlan, TrainPlan
from ..errors import UsageError
from ..store import Store, open_store
from ..train.normalize import Normalizer, normalizer_for
from ..train.weights import ClassWeights, class_weights

SPLITS = ("train", "validation")
LABELS = ("int", "onehot")


class Feed:
    """The blocks of one split of a store, read and turned into numpy arrays ``(x, y, w)``."""

    def __init__(
        self,
        store: Store | str | os.PathLike[str],
        opts: FitOptions,
        *,
        split: str = "train",
        labels: str = "onehot",
        normalizer: Normalizer | None = None,
    ) -> None:
        if split not in SPLITS:
            raise UsageError(f"split must be train or validation (received {split!r})")
        if labels not in LABELS:
            raise UsageError(f"labels must be int or onehot (received {labels!r})")
        self.opts, self.split_name, self.label_kind = opts, split, labels
        self.location = str(store.path) if isinstance(store, Store) else os.fspath(store)
        self._owned, self._closed = not isinstance(store, Store), False
        self.store = store if isinstance(store, Store) else open_store(store)
        splits = SplitPlan.of(self.store, opts)
        self.plan: TrainPlan = splits.blocks(opts, opts.blocks.chunk)
        self.normalizer = (
            normalizer
            if normalizer is not None
            else normalizer_for(opts.normalize, self.store, self.plan.split.train)
        )
        self.weights: ClassWeights = class_weights(
            opts.class_weight, self.plan.labeller.classes, self.plan.balance, opts.loss
        )

    # -- what a loop asks of it -------------------------------------------------------------------
    @property
    def training(self) -> bool:
        return self.split_name == "train"

    @property
    def classes(self) -> list[int]:
        """The class values, in the order of the class indices ``y`` holds."""
        return list(self.plan.labeller.classes)

    @property
    def n_channels(self) -> int:
        return int(self.store.n_channels)

    @property
    def window(self) -> int:
        return self.opts.windows.window

    @property
    def class_weight(self) -> dict[int, float] | None:
        """The class weights by class index, as Keras's ``fit(class_weight=...)`` takes them."""
        w = self.weights.weights
        return None if w is None else {i: float(v) for i, v in enumerate(w)}

    def groups(self, epoch: int) -> list[list[Block]]:
        """The groups of blocks of ``epoch`` in the order ``chunkfit train`` trains them (the
        validation groups in store order, whatever the epoch)."""
        return self.plan.train_groups(epoch) if self.training else self.plan.val_groups()

    def epoch_windows(self) -> int:
        """Windows one pass over the split yields."""
        return self.plan.epoch_windows() if self.training else sum(self.plan.val_sizes)

    def group_windows(self, group: list[Block]) -> int:
        """Windows group ``group`` yields per pass."""
        if self.training:
            return self.plan.group_windows(group)
        return sum(self.plan.val_sizes[b.index] for b in group)

    def read(self, epoch: int, k: int, group: list[Block]) -> BlockData:
        """Group ``k`` of ``epoch``: raw samples, window offsets in their order, class indices."""
        shuffle = self.opts.blocks.shuffle_windows
        if self._closed:  # an iterator rewound by set_state after its end closed the store
            self.store, self._closed = open_store(self.location), False
        return self.plan.read(self.store, group, epoch if self.training else None, k, shuffle)

    def arrays(self, data: BlockData) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """``(x [n, window, channels] float32, y, sample_weight)`` of a group read by ``read``:
        the windows copied out of the raw samples and standardised, ``y`` class indices (int32) or
        one-hot (float32), ``sample_weight`` each window's class weight (None without weights, and
        for validation, which Keras does not weight either)."""
        x = window_rows(data.samples, data.offsets, self.window)
        return (
            normalized(x, self.normalizer),
            self.targets(data.labels),
            self.sample_weight(data.labels),
        )

    def targets(self, labels: np.ndarray) -> np.ndarray:
        if self.label_kind == "int":
            return labels.astype(np.int32)
        return np.eye(self.plan.labeller.n_classes, dtype=np.float32)[labels]

    def sample_weight(self, labels: np.ndarray) -> np.ndarray | None:
        w = self.weights.weights
        if w is None or not self.training:
            return None
        return np.asarray(w, dtype=np.float32)[labels]

    def close(self) -> None:
        """Close the store if the feed opened it (a ``Store`` passed in stays the caller's)."""
        if self._owned and not self._closed:
            self.store.close()
            self._closed = True

    # -- a copy in another process opens the store again -------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        return {
            "location": self.location,
            "opts": self.opts.to_dict(),
            "split": self.split_name,
            "labels": self.label_kind,
            "normalizer": self.normalizer.to_dict(),
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        n = state["normalizer"]
        self.__init__(  # type: ignore[misc]
            state["location"],
            FitOptions.from_dict(state["opts"]),
            split=state["split"],
            labels=state["labels"],
            normalizer=Normalizer(n["mode"], tuple(n["mean"]), tuple(n["std"])),
        )


def window_rows(samples: np.ndarray, offsets: np.ndarray, window: int) -> np.ndarray:
    """The windows ``samples[o : o + window]`` of ``offsets``, float32 [n, window, channels]:
    rows of a strided view of the samples, copied once.

    Example: samples [[0], [1], [2], [3]], offsets [2, 0], window 2 -> [[[2], [3]], [[0], [1]]].
    """
    view = np.lib.stride_tricks.sliding_window_view(samples, window, axis=0)
    return np.ascontiguousarray(view.transpose(0, 2, 1)[offsets], dtype=np.float32)


def normalized(x: np.ndarray, normalizer: Normalizer) -> np.ndarray:
    """``x`` [..., window, channels] standardised as ``Normalizer.apply`` does inside train's
    compiled step, in numpy."""
    if normalizer.mode == "none":
        return x
    eps = np.float32(normalizer.epsilon)
    if normalizer.mode == "global":
        mean = np.asarray(normalizer.mean, np.float32)
        scale = np.maximum(np.asarray(normalizer.std, np.float32), eps)
        return ((x - mean) / scale).astype(np.float32)
    mean = x.mean(axis=-2, keepdims=True, dtype=np.float32)
    var = np.square(x - mean).mean(axis=-2, keepdims=True, dtype=np.float32)
    return ((x - mean) / np.sqrt(var + eps)).astype(np.float32)


def fit_options(
    *,
    window: int,
    stride: int,
    chunk: int,
    seed: int,
    mix: int,
    validation: float,
    validation_segments: float | None,
    label: str,
    label_margin: int,
    normalize: str,
    class_weight: str,
    oversample: float,
    shuffle: bool,
) -> FitOptions:
    """The training options a feed plans with: those of ``chunkfit.fit`` that choose windows."""
    opts = FitOptions.from_keywords(
        window=window,
        stride=stride,
        chunk=chunk,
        seed=seed,
        mix=mix,
        validation=validation,
        validation_segments=validation_segments,
        label=label,
        label_margin=label_margin,
        normalize=normalize,
        class_weight=class_weight,
        oversample=oversample,
        batch_size=1,  # a feed batches (or not) itself; train's chunk >= batch rule is not its own
    )
    if not shuffle:
        import dataclasses

        blocks = dataclasses.replace(opts.blocks, shuffle_blocks=False, shuffle_windows=False)
        opts = dataclasses.replace(opts, blocks=blocks)
    return opts
