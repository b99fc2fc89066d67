"""chunkfit.dataset: the tf.data, Grain and PyTorch views yield chunkfit.blocks' windows, each once
per epoch; Grain resumes from its iterator's state; PyTorch workers and ranks share them out."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from feedstore import WINDOW, feed_store, seen, tail_split

import chunkfit
from chunkfit.core.blocks import Block, BlockData
from chunkfit.errors import MissingExtraError
from chunkfit.feed.source import Feed

RAW = {"window": WINDOW, "normalize": "none", "validation": 0.2, "seed": 7, "chunk": 100}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return feed_store(tmp_path_factory.mktemp("feed") / "feed.zarr")


def test_tf_dataset_yields_every_training_window_once(store: Path) -> None:
    ds = chunkfit.dataset(store, kind="tf", batch_size=32, **RAW)
    assert seen((x.numpy(), y.numpy()) for x, y in ds) == tail_split(0.2)[0]


def test_tf_dataset_batches_hold_at_most_batch_size(store: Path) -> None:
    ds = chunkfit.dataset(store, kind="tf", batch_size=32, mix=2, **RAW)
    sizes = [int(x.shape[0]) for x, _ in ds]
    assert max(sizes) == 32 and sum(sizes) == sum(tail_split(0.2)[0].values())


def test_tf_dataset_passes_are_the_epochs_of_blocks(store: Path) -> None:
    ds = chunkfit.dataset(store, kind="tf", batch_size=1000, labels="int", **RAW)
    passes = [[x.numpy()[:, 0, 0] for x, _ in ds] for _ in range(2)]
    blocks = [
        [x[:, 0, 0] for x, _, _ in chunkfit.blocks(store, epoch=e, labels="int", **RAW)]
        for e in range(2)
    ]
    pairs = [ab for p, q in zip(passes, blocks, strict=True) for ab in zip(p, q, strict=True)]
    assert all(np.array_equal(a, b) for a, b in pairs)
    assert not np.array_equal(passes[0][0], passes[1][0])


def test_tf_dataset_weights_and_normalises_as_blocks(store: Path) -> None:
    opts = {**RAW, "normalize": "window", "class_weight": "balanced"}
    x, y, w = next(iter(chunkfit.dataset(store, kind="tf", batch_size=1000, **opts)))
    bx, by, bw = next(iter(chunkfit.blocks(store, **opts)))
    assert np.allclose(x.numpy(), bx, atol=1e-5)
    assert np.array_equal(y.numpy(), by) and np.allclose(w.numpy(), bw)


# groups of 5 shuffled blocks of 40 windows: their short last batches of 64 come to 35, 36 or 37
# batches an epoch, and Keras cuts the later epochs at one more than the first
VARYING = {**RAW, "chunk": 40, "mix": 5, "seed": 8}


def _group_batches(store: Path, epochs: int) -> list[int]:
    feed = chunkfit.blocks(store, **VARYING).feed
    return [sum(-(-feed.group_windows(g) // 64) for g in feed.groups(e)) for e in range(epochs)]


def test_tf_dataset_epochs_of_varying_groups_each_yield_every_window_once(store: Path) -> None:
    assert len(set(_group_batches(store, 2))) == 2
    ds = chunkfit.dataset(store, kind="tf", batch_size=64, **VARYING)
    passes = [[(x.numpy(), y.numpy()) for x, y in ds] for _ in range(2)]
    windows = sum(tail_split(0.2)[0].values())
    assert [len(p) for p in passes] == [-(-windows // 64)] * 2 == [int(ds.cardinality())] * 2
    assert seen(passes[0]) == seen(passes[1]) == tail_split(0.2)[0]


def test_keras_trains_every_epoch_of_varying_groups_whole(store: Path) -> None:
    import keras

    assert max(_group_batches(store, 6)) > _group_batches(store, 1)[0] + 1
    ds = chunkfit.dataset(store, kind="tf", batch_size=64, **VARYING)
    steps: list[int] = []
    count = keras.callbacks.LambdaCallback(
        on_epoch_begin=lambda *_, **__: steps.append(0),
        on_train_batch_end=lambda *_, **__: steps.__setitem__(-1, steps[-1] + 1),
    )
    model = keras.Sequential(
        [keras.Input((WINDOW, 2)), keras.layers.Flatten(), keras.layers.Dense(2, "softmax")]
    )
    model.compile("sgd", "categorical_crossentropy")
    model.fit(ds, epochs=6, shuffle=False, verbose=0, callbacks=[count])
    assert steps == [-(-sum(tail_split(0.2)[0].values()) // 64)] * 6


def test_grain_dataset_yields_every_training_window_once(store: Path) -> None:
    ds = chunkfit.dataset(store, kind="grain", batch_size=32, **RAW)
    assert seen((x, y) for x, y, _ in ds) == tail_split(0.2)[0]


def test_grain_reading_threads_take_every_window_once_and_read_each_group_once(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import grain

    reads: list[tuple[int, int]] = []
    read = Feed.read

    def spy(self: Feed, epoch: int, k: int, group: list[Block]) -> BlockData:
        reads.append((epoch, k))
        return read(self, epoch, k, group)

    monkeypatch.setattr(Feed, "read", spy)
    opts = {**RAW, "mix": 2}  # groups of other sizes each epoch
    ds = chunkfit.dataset(store, kind="grain", batch_size=8, epochs=2, **opts)
    batches = [(x, y) for x, y, _ in ds.to_iter_dataset(grain.ReadOptions(num_threads=16))]
    sizes = np.cumsum([len(x) for x, _ in batches])
    epoch = int(np.searchsorted(sizes, sum(tail_split(0.2)[0].values()))) + 1
    assert seen(batches[:epoch]) == seen(batches[epoch:]) == tail_split(0.2)[0]
    groups = len(chunkfit.blocks(store, **opts))
    assert sorted(reads) == [(e, k) for e in range(2) for k in range(groups)]


def test_grain_iterator_resumes_from_its_state_mid_epoch(store: Path) -> None:
    ds = chunkfit.dataset(store, kind="grain", batch_size=32, epochs=2, **RAW)
    whole = [x for x, _, _ in ds.to_iter_dataset()]
    it = iter(ds.to_iter_dataset())
    taken = [next(it)[0] for _ in range(len(whole) // 2 + 5)]
    state = json.loads(json.dumps(it.get_state()))
    again = iter(
        chunkfit.dataset(store, kind="grain", batch_size=32, epochs=2, **RAW).to_iter_dataset()
    )
    again.set_state(state)
    rest = [x for x, _, _ in again]
    assert len(taken) + len(rest) == len(whole)
    assert all(np.array_equal(a, b) for a, b in zip(taken + rest, whole, strict=True))


def test_torch_dataset_yields_every_training_window_once(store: Path) -> None:
    ds = chunkfit.dataset(store, kind="torch", batch_size=32, **RAW)
    assert seen((x.numpy(), y.numpy()) for x, y, _ in ds) == tail_split(0.2)[0]


_LOADERS = """
import json, sys
from collections import Counter
import torch
import chunkfit
store, opts = sys.argv[1], json.loads(sys.argv[2])
out = []
for rank in range(2):
    ds = chunkfit.dataset(store, kind="torch", batch_size=32, rank=rank, world_size=2, **opts)
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)
    pairs = []
    for x, y, w in loader:
        pairs += list(zip(x[:, 0, 0].int().tolist(), y.argmax(-1).tolist()))
    out.append(pairs)
print(json.dumps(out))
"""


def test_torch_loader_workers_and_ranks_partition_the_windows(store: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_LOADERS), str(store), json.dumps(RAW)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=True,
    )
    ranks = [Counter(map(tuple, r)) for r in json.loads(result.stdout.strip().splitlines()[-1])]
    assert all(ranks) and not set(ranks[0]) & set(ranks[1])
    assert ranks[0] + ranks[1] == tail_split(0.2)[0]


_WITHOUT = """
import sys
sys.modules[sys.argv[1]] = None  # as if not installed
import chunkfit
try:
    chunkfit.dataset(sys.argv[2], kind=sys.argv[3], window=16)
except chunkfit.errors.MissingExtraError as err:
    assert isinstance(err, ImportError)
    print(err)
"""


@pytest.mark.parametrize(("library", "kind"), [("torch", "torch"), ("grain", "grain")])
def test_a_missing_library_is_one_line_naming_the_extra(
    store: Path, library: str, kind: str
) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_WITHOUT), library, str(store), kind],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=True,
    )
    assert result.stdout.strip() == (
        f"chunkfit.dataset(kind=...) needs the {library} package; install it with "
        f"pip install 'chunkfit[{library}]'"
    )


def test_an_unknown_kind_is_refused(store: Path) -> None:
    with pytest.raises(chunkfit.errors.UsageError, match="kind must be one of tf, torch, grain"):
        chunkfit.dataset(store, kind="mxnet", **RAW)


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"kind": "grain", "epoch": -1}, "epoch must be >= 0 (received epoch=-1)"),
        ({"kind": "grain", "epochs": 0}, "epochs must be >= 1 (received epochs=0)"),
        ({"kind": "tf", "epochs": 2}, "kind='tf' takes no epochs: each pass over the dataset"),
        ({"kind": "torch", "epochs": 2}, "kind='torch' takes no epochs: each pass yields"),
        ({"kind": "tf", "rank": 0}, "rank and world_size are for kind='torch'"),
        ({"kind": "grain", "world_size": 2}, "rank and world_size are for kind='torch'"),
        (
            {"kind": "tf", "split": "validation", "validation": 0.0},
            "split='validation' holds no windows (received validation=0.0",
        ),
    ],
)
def test_settings_a_kind_cannot_use_are_refused(
    store: Path, given: dict[str, object], message: str
) -> None:
    with pytest.raises(chunkfit.errors.UsageError, match=f"^{re.escape(message)}"):
        chunkfit.dataset(store, **{**RAW, **given})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"epoch": -1}, "epoch must be >= 0"),
        ({"epochs": 0}, "epochs must be >= 1"),
        ({"split": "validation", "validation": 0.0}, "split='validation' holds no windows"),
    ],
)
def test_blocks_refuse_an_epoch_range_or_split_without_windows(
    store: Path, given: dict[str, object], message: str
) -> None:
    with pytest.raises(chunkfit.errors.UsageError, match=f"^{re.escape(message)}"):
        chunkfit.blocks(store, **{**RAW, **given})  # type: ignore[arg-type]


def test_missing_extra_error_is_an_import_error() -> None:
    assert issubclass(MissingExtraError, ImportError)
