"""Each optional dependency missing: one line naming the extra that installs it, no traceback, and
exit 2 (a setting to fix, as a usage mistake; docs/troubleshooting.md), whichever extra it is.

The package is blocked in a real subprocess (``sys.modules[name] = None``, so its import fails as
if it were not installed). The recording formats have their own test
(tests/ingest/formats/test_formats_extras.py).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from support import error_line, make_store, run_without, siblings

S3_LINE = "s3:// paths need the obstore package; install it with pip install 'chunkfit[s3]'"


def test_info_on_s3_without_obstore_names_the_s3_extra(tmp_path: Path) -> None:
    result = run_without("obstore", ["info", "s3://bucket/site.zarr"], tmp_path)
    assert (result.returncode, error_line(result)) == (
        2,
        f"chunkfit: error: s3://bucket/site.zarr: {S3_LINE}",
    )


def test_ingest_into_s3_without_obstore_names_the_s3_extra(tmp_path: Path) -> None:
    (tmp_path / "x.csv").write_text("a\n1\n2\n")
    result = run_without(
        "obstore", ["ingest", "s3://bucket/site.zarr", "x.csv", "--rate", "1"], tmp_path
    )
    assert (result.returncode, error_line(result)) == (
        2,
        f"chunkfit: error: s3://bucket/site.zarr: {S3_LINE}",
    )


def test_evaluate_of_an_s3_run_without_obstore_names_the_s3_extra(tmp_path: Path) -> None:
    store = make_store(tmp_path / "s.zarr", np.zeros((100, 1), np.float32), events=[5])
    result = run_without("obstore", ["evaluate", "s3://bucket/run", str(store)], tmp_path)
    assert (result.returncode, error_line(result)) == (
        2,
        f"chunkfit: error: s3://bucket/run: {S3_LINE}",
    )


def test_train_with_tensorboard_without_its_package_names_the_extra_before_training(
    tmp_path: Path,
) -> None:
    signal = np.sin(np.arange(2_000, dtype=np.float32))[:, None]
    store = make_store(tmp_path / "s.zarr", signal, events=list(range(10, 2_000, 50)))
    args = ["train", str(store), "--window", "16", "--epochs", "1", "--out", "run"]
    result = run_without("tensorboard", [*args, "--tensorboard", "tb"], tmp_path)
    assert (result.returncode, error_line(result)) == (
        2,
        "chunkfit: error: --tensorboard needs the tensorboard package; install it with pip "
        "install 'chunkfit[tensorboard]'",
    )
    assert siblings(tmp_path / "run") == ["s.zarr"]


def test_the_jax_backend_without_jax_names_the_jax_extra(tmp_path: Path) -> None:
    store = make_store(tmp_path / "s.zarr", np.zeros((100, 1), np.float32), events=[5])
    result = run_without("jax", ["--backend", "jax", "train", str(store)], tmp_path)
    assert (result.returncode, error_line(result)) == (
        2,
        "chunkfit: error: the JAX backend needs the jax package: pip install 'chunkfit[jax]', or "
        "train on TensorFlow (unset KERAS_BACKEND)",
    )
