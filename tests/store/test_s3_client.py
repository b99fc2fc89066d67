"""chunkfit's own client for object storage (``chunkfit.store.s3client``, obstore) against the real
S3 server on loopback: ingest, append and info import neither s3fs nor botocore; credentials from a
profile; a bucket's region found when none is configured; conditional deletes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
from s3support import s3fs_client, start_server, use_server
from support import REPO, cli_env, error_line, write_csv

from chunkfit.store import s3client
from chunkfit.store.remote import Remote


def _python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=REPO,
    )


def test_ingest_append_and_info_on_s3_import_neither_s3fs_nor_botocore(
    bucket: str, tmp_path: Path
) -> None:
    csv = write_csv(
        tmp_path / "a.csv", np.random.default_rng(0).normal(size=(3000, 2)), names=["a", "b"]
    )
    url = f"s3://{bucket}/i.zarr"
    code = (
        "import sys\nfrom chunkfit.cli import main\n"
        f"main(['ingest', {url!r}, {str(csv)!r}, '--rate', '10'])\n"
        f"main(['ingest', {url!r}, {str(csv)!r}, '--rate', '10', '--append'])\n"
        f"main(['info', {url!r}])\n"
        "modules = ('s3fs', 'botocore', 'aiobotocore', 'aiohttp', 'obstore')\n"
        "print(sorted(m for m in modules if m in sys.modules))\n"
    )
    result = _python(code, cli_env())
    assert result.returncode == 0, result.stderr
    assert "samples      6,000" in result.stdout  # zarr read the appended store through obstore
    assert result.stdout.strip().splitlines()[-1] == "['obstore']"
    # What it wrote is a store that s3fs (what xarray reads through) sees whole.
    listed = s3fs_client().find(f"{bucket}/i.zarr")
    assert f"{bucket}/i.zarr/zarr.json" in listed and not any(
        k.endswith(".chunkfit-lease") for k in listed
    )


def test_credentials_from_a_profile_are_used_when_none_are_in_the_environment(
    bucket: str, tmp_path: Path
) -> None:
    credentials = tmp_path / "credentials"
    credentials.write_text(
        "[site7]\naws_access_key_id = fromprofile\naws_secret_access_key = secret7\n"
    )
    env = {
        k: v
        for k, v in cli_env().items()
        if k not in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
    }
    env.update(
        {
            "AWS_SHARED_CREDENTIALS_FILE": str(credentials),
            "AWS_CONFIG_FILE": "/nonexistent",
            "AWS_PROFILE": "site7",
            "AWS_EC2_METADATA_DISABLED": "true",
        }
    )
    csv = write_csv(
        tmp_path / "a.csv", np.random.default_rng(0).normal(size=(3000, 2)), names=["a", "b"]
    )
    url = f"s3://{bucket}/p.zarr"
    code = (
        "import json\nfrom chunkfit.cli import main\nfrom chunkfit.store import s3client\n"
        f"main(['ingest', {url!r}, {str(csv)!r}, '--rate', '10'])\n"
        f"given = s3client.bucket_store({bucket!r}).credential_provider()\n"
        "print(json.dumps({k: given[k] for k in ('access_key_id', 'secret_access_key')}))\n"
    )
    result = _python(code, env)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {
        "access_key_id": "fromprofile",
        "secret_access_key": "secret7",
    }
    assert "secret7" not in result.stdout.splitlines()[0] and "secret7" not in result.stderr


def test_no_credentials_anywhere_is_one_line_for_an_ingest(bucket: str, tmp_path: Path) -> None:
    env = {
        k: v
        for k, v in cli_env().items()
        if k not in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
    }
    env.update(
        {
            "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
            "AWS_CONFIG_FILE": "/nonexistent",
            "AWS_EC2_METADATA_DISABLED": "true",
        }
    )
    csv = write_csv(tmp_path / "a.csv", np.zeros((100, 1)), names=["a"])
    url = f"s3://{bucket}/n.zarr"
    result = subprocess.run(
        [sys.executable, "-m", "chunkfit", "ingest", url, str(csv), "--rate", "10"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert error_line(result) == (
        f"chunkfit: error: {url}: no AWS credentials found; set AWS_PROFILE or AWS_ACCESS_KEY_ID "
        "and AWS_SECRET_ACCESS_KEY, or pass --anon for a public bucket (no store was created)"
    )
    assert s3fs_client().find(f"{bucket}/n.zarr") == []


def test_a_buckets_region_is_asked_of_the_endpoint_when_none_is_configured(bucket: str) -> None:
    import boto3

    name = f"eu-{os.urandom(5).hex()}"
    boto3.client("s3").create_bucket(
        Bucket=name, CreateBucketConfiguration={"LocationConstraint": "eu-west-1"}
    )
    endpoint = os.environ["AWS_ENDPOINT_URL"]
    assert s3client.bucket_region(name, endpoint) == "eu-west-1"
    assert s3client.bucket_region(bucket, endpoint) == "us-east-1"
    assert s3client.bucket_region("no-such-endpoint-bucket", "http://127.0.0.1:9") == "us-east-1"


def test_delete_if_deletes_only_the_object_with_that_etag(bucket: str) -> None:
    remote = Remote(f"s3://{bucket}/d")
    first = remote.put_if("lease", b"1")
    assert (
        first is not None and remote.put_if("lease", b"2") is None
    )  # it exists: not created again
    second = remote.put_if("lease", b"3", etag=first)
    assert second is not None and remote.put_if("lease", b"4", etag=first) is None  # stale ETag
    assert remote.delete_if("lease", first) is False and remote.get("lease") == b"3"
    assert remote.delete_if("lease", second) is True and remote.get("lease") is None
    assert remote.delete_if("lease", second) is False


def test_a_process_that_points_the_aws_variables_at_another_server_talks_to_that_server(
    bucket: str,
) -> None:
    Remote(f"s3://{bucket}/e").put("x", b"on the first server")
    other = start_server()
    try:
        env = use_server(other)
        next(env)
        try:
            s3fs_client().mkdir(bucket)  # the same bucket name, empty, on the other server
            assert Remote(f"s3://{bucket}/e").get("x") is None
            Remote(f"s3://{bucket}/e").put("x", b"on the second server")
        finally:
            next(env, None)
    finally:
        other.stop()
    assert Remote(f"s3://{bucket}/e").get("x") == b"on the first server"
