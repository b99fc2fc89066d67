"""The arithmetic of several workers without TensorFlow (chunkfit.train.tensorflow.cluster):
TF_CONFIG parsing, ``--devices`` and each replica's share of a global batch."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from chunkfit.errors import UsageError
from chunkfit.train.tensorflow.cluster import (
    Cluster,
    check_devices,
    cluster_from_env,
    parse_tf_config,
    share_ranges,
    shares,
)

TWO = {"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 1}}


def test_importing_the_cluster_arithmetic_loads_no_tensorflow() -> None:
    code = "import sys, chunkfit.train.tensorflow.cluster; print('tensorflow' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "False"


def test_two_workers_are_ranked_in_order_and_this_one_is_named() -> None:
    cluster = parse_tf_config(json.dumps(TWO))
    assert cluster == Cluster(("a:1", "b:2"), 1, (("worker", 0), ("worker", 1)))
    assert not cluster.chief and cluster.name(0) == "worker 0 (a:1)"


def test_the_chief_is_rank_zero_before_the_workers() -> None:
    config = {
        "cluster": {"worker": ["w:2"], "chief": ["c:1"]},
        "task": {"type": "chief", "index": 0},
    }
    cluster = parse_tf_config(json.dumps(config))
    assert cluster is not None and cluster.chief and cluster.addresses == ("c:1", "w:2")
    assert cluster.rank_of("worker", 0) == 1 and cluster.rank_of("worker", 5) is None


def test_a_single_task_is_no_cluster() -> None:
    config = {"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0}}
    assert parse_tf_config(json.dumps(config)) is None


def test_no_or_blank_tf_config_is_no_cluster() -> None:
    assert cluster_from_env({}) is None
    assert cluster_from_env({"TF_CONFIG": "  "}) is None


def test_tf_config_is_read_from_the_environment_given() -> None:
    cluster = cluster_from_env({"TF_CONFIG": json.dumps(TWO)})
    assert cluster is not None and cluster.rank == 1


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("{not json", "not JSON"),
        ("[]", "it needs a 'cluster' and a 'task' object"),
        (
            json.dumps({"cluster": {"ps": ["p:1"]}, "task": {}}),
            "job 'ps': chunkfit runs synchronous workers only",
        ),
        (
            json.dumps({"cluster": {"worker": ["nohost"]}, "task": {}}),
            "cluster.worker must be a list of 'host:port' strings",
        ),
        (
            json.dumps({"cluster": {"chief": ["a:1", "b:2"]}, "task": {}}),
            "there can be one chief",
        ),
        (
            json.dumps({"cluster": {"worker": ["a:1", "a:1"]}, "task": {}}),
            "two tasks share an address",
        ),
        (
            json.dumps(
                {"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": "0"}}
            ),
            "task.index must be an integer",
        ),
        (
            json.dumps(
                {"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 2}}
            ),
            "task worker:2 is not in the cluster",
        ),
    ],
)
def test_a_tf_config_that_describes_no_cluster_is_refused_in_one_line(text: str, why: str) -> None:
    with pytest.raises(UsageError, match=r"^TF_CONFIG is not a valid cluster description") as err:
        parse_tf_config(text)
    assert f"({why}" in str(err.value) and "\n" not in str(err.value)


def test_a_long_tf_config_is_shown_cut_short() -> None:
    with pytest.raises(UsageError) as err:
        parse_tf_config("x" * 500)
    assert "x" * 200 + "..." in str(err.value) and "x" * 201 not in str(err.value)


@pytest.mark.parametrize(
    ("devices", "logical"), [(None, None), ("all", 0), ("cpu:1", 1), ("cpu:4", 4)]
)
def test_devices_name_every_gpu_or_logical_cpus(devices: str | None, logical: int | None) -> None:
    assert check_devices(devices) == logical


@pytest.mark.parametrize("devices", ["cpu:0", "gpu:2", "cpu:", "two"])
def test_other_devices_are_refused(devices: str) -> None:
    with pytest.raises(UsageError, match=r"^--devices must be all or cpu:N \(received"):
        check_devices(devices)


def test_replicas_take_contiguous_slices_of_each_global_batch() -> None:
    """The docstring's example: n=10, batch=4, 2 replicas."""
    index, real = shares(10, 4, 2)
    assert index.tolist() == [[[0, 1], [2, 3]], [[4, 5], [6, 7]], [[8, 0], [9, 0]]]
    assert real.tolist() == [
        [[True, True], [True, True]],
        [[True, True], [True, True]],
        [[True, False], [True, False]],
    ]


@pytest.mark.parametrize(("n", "batch", "replicas"), [(1, 4, 2), (37, 8, 3), (64, 16, 4)])
def test_every_window_is_trained_once_by_one_replica(n: int, batch: int, replicas: int) -> None:
    index, real = shares(n, batch, replicas)
    assert sorted(index[real].tolist()) == list(range(n))
    assert index.shape[2] == -(-batch // replicas)


def test_a_replicas_ranges_in_run_json_match_its_shares() -> None:
    index, real = shares(10, 4, 2)
    ranges = share_ranges(10, 4, 2, 1)
    assert ranges == {"full_batches": [2, 2, 4], "last_batch": [9, 10]}
    assert index[2, 1][real[2, 1]].tolist() == list(range(*ranges["last_batch"]))


def test_no_short_batch_has_no_last_batch_range() -> None:
    assert share_ranges(8, 4, 2, 0) == {"full_batches": [2, 0, 2]}


def test_shares_pad_with_window_zero() -> None:
    index, real = shares(3, 4, 2)
    assert np.all(index[~real] == 0)
