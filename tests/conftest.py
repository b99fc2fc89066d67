"""Shared fixtures: the two store backends, small stores and sources written into tmp dirs."""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest
from hypothesis import settings
from support import REPO, SUFFIX, write_csv

from chunkfit._quiet import QUIET_LOG_LEVEL

# tests marked backends run on TensorFlow and on JAX
pytest_plugins = ["backendparams"]

if TYPE_CHECKING:
    from livesupport import Stream
    from s3support import S3Server
    from scoring_support import Trained

# jax sets TF_CPP_MIN_LOG_LEVEL=1 wherever it is unset (jax/__init__.py), and Keras 3.15 imports jax
# with its callbacks (keras.callbacks.OrbaxCheckpoint): the first test module importing keras made
# it "1" for the whole session, so every CLI subprocess after it kept TensorFlow's native logs, and
# a worker's native stderr, on. The CLI's own default, unless whoever runs the tests chose a level.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", QUIET_LOG_LEVEL)

# ``make test`` runs every property test on the same examples, run after run: a property that fails
# on a rare input fails every time, not one run in twenty. ``HYPOTHESIS_PROFILE=explore`` draws new,
# and more, examples on each run to hunt for such inputs.
settings.register_profile("deterministic", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", max_examples=500, derandomize=False, database=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "deterministic"))


# ``make test`` hands whole modules to parallel workers (pytest-xdist, ``--dist loadfile``), in
# collection order. The modules that took longest in a serial run on a 2-core machine go first, so
# that no long module is handed out last and runs alone while the other workers sit idle.
HEAVIEST_FIRST = (
    "test_trainer",
    "test_workers",
    "test_resume",
    "test_jax_engine",
    "test_stepper",
    "test_bench",
    "test_s3_train",
    "test_lock",
    "test_threadtune",
    "test_score_cli",
    "test_live",
    "test_train_cli",
    "test_bad_input",
    "test_s3_store",
    "test_s3_live",
    "test_faults",
)


# Then, before the many light modules rather than after them (where one would run alone at the
# end): the modules whose tests also run on JAX, each in a pytest of its own (backendparams.py), and
# the modules of features that train or convert models whose weight is not yet measured (named by
# how their names begin).
HEAVY_FAMILIES = ("test_export", "test_feed", "test_engine_choice")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    on_jax = {
        item.path
        for item in items
        if item.get_closest_marker("backends") or item.get_closest_marker("jax_only")
    }

    def rank(item: pytest.Item) -> int:
        stem = item.path.stem
        if stem in HEAVIEST_FIRST:
            return HEAVIEST_FIRST.index(stem)
        if item.path in on_jax or stem.startswith(HEAVY_FAMILIES):
            return len(HEAVIEST_FIRST)
        return len(HEAVIEST_FIRST) + 1

    items.sort(key=rank)  # stable: each module keeps its order


# XLA's compiled programs, kept on disk for the whole test run (JAX's persistent compilation cache):
# every process of the run that trains or scores on JAX (the JAX pytest of each module, its CLI
# subprocesses, the other xdist worker's) loads a program another one compiled, as chunkfit's own
# cache does for a user's runs, instead of each fresh process compiling it again. A hit is the
# program compiled from the same computation and options, so no result changes. The size limit
# turns on JAX's file lock (the filelock package) around every read and write of the cache: a
# process never reads an entry another is still writing. Without filelock each process keeps its
# own cache, as before.
XLA_CACHE = "JAX_COMPILATION_CACHE_DIR"
_made_xla_cache: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get(XLA_CACHE) is not None:  # made by the pytest that started this one
        return
    if importlib.util.find_spec("filelock") is None:
        return
    folder = tempfile.mkdtemp(prefix="chunkfit-tests-xla-")
    _made_xla_cache.append(folder)
    os.environ[XLA_CACHE] = folder
    os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0.1"  # chunkfit's threshold
    os.environ["JAX_COMPILATION_CACHE_MAX_SIZE"] = str(4 << 30)


def pytest_unconfigure(config: pytest.Config) -> None:
    for folder in _made_xla_cache:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def empty_thread_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Runs measure or apply threads from a cache of this session only
    (chunkfit.train.tensorflow.threadtune), never from one a user's earlier runs left in their home;
    CLI subprocesses inherit it."""
    os.environ["CHUNKFIT_CACHE_DIR"] = str(tmp_path_factory.mktemp("chunkfit-cache"))


@pytest.fixture
def no_op_determinism() -> Iterator[None]:
    """XLA has no deterministic form of some ops (MaxPooling's gradient), and op determinism stays
    on in a process once a deterministic run of the suite turned it on: off for the test, then as it
    was."""
    from tensorflow.python.framework import config  # TensorFlow has no public query or switch-off

    was = config.is_op_determinism_enabled()
    config.disable_op_determinism()
    yield
    if was:
        config.enable_op_determinism()


@pytest.fixture(params=["zarr", "hdf5"])
def backend(request: pytest.FixtureRequest) -> str:
    """Each store test runs once per backend."""
    return str(request.param)


@pytest.fixture
def store_path(tmp_path: Path, backend: str) -> Path:
    """A path for a new store of the current backend (not created)."""
    return tmp_path / f"store{SUFFIX[backend]}"


@pytest.fixture
def small_csv(tmp_path: Path) -> Path:
    """Two channels, 300 rows at 100 Hz with a time column."""
    rng = np.random.default_rng(7)
    values = rng.normal(size=(300, 2))
    return write_csv(tmp_path / "small.csv", values, names=["a", "b"], times=np.arange(300) / 100.0)


@pytest.fixture
def ecg_csv() -> Path:
    return REPO / "data" / "ecg208.csv"


@pytest.fixture
def ecg_events() -> Path:
    return REPO / "data" / "ecg208_events.txt"


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """moto's S3 server on a free loopback port for the whole session (started on first use)."""
    from s3support import start_server

    server = start_server()
    yield server
    server.stop()


@pytest.fixture
def bucket(s3_server: S3Server) -> Iterator[str]:
    """A fresh bucket on the session's S3 server, with this process's S3 environment pointing at
    it."""
    from s3support import make_bucket, use_server

    env = use_server(s3_server)
    next(env)
    yield make_bucket()
    next(env, None)


@pytest.fixture
def streams() -> Iterator[list[Stream]]:
    """Live streams a test starts (``livesupport.Stream``): every process of each is stopped after
    it."""
    started: list[Stream] = []
    yield started
    for s in started:
        s.stop()


@pytest.fixture(scope="session")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Trained:
    """The scoring tests' two small runs (window 16, stride 1 and 3), trained once per session."""
    from scoring_support import trained

    return trained(tmp_path_factory.getbasetemp())


@pytest.fixture(scope="module")
def segmented(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store to score, one per test module: three segments, [0, 1000), [1000, 1010) (shorter than
    a window) and [1010, 2200), with events everywhere (scoring_support.segmented_store)."""
    from scoring_support import segmented_store

    return segmented_store(tmp_path_factory.mktemp("segmented") / "segmented.zarr")
