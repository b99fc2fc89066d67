"""chunkfit.dataset: the tf.data, Grain and PyTorch views yield chunkfit.blocks' windows, each once
per epoch; Grain resumes from its iterator's state; PyTorch workers and ranks share them out."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from feedstore import WINDOW, feed_store, seen, tail_split

import chunkfit
from chunkfit.errors import MissingExtraError

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


def test_grain_dataset_yields_every_training_window_once(store: Path) -> None:
    ds = chunkfit.dataset(store, kind="grain", batch_size=32, **RAW)
    assert seen((x, y) for x, y, _ in ds) == tail_split(0.2)[0]


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


def test_missing_extra_error_is_an_import_error() -> None:
    assert issubclass(MissingExtraError, ImportError)
