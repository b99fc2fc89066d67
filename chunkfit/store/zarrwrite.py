"""Zarr v3 written without importing zarr: array and group metadata, and whole chunks encoded here.

Importing zarr costs CPU (asyncio, its codec registry, config) that an ingest would rather give
its parser, and its write path sends every chunk through an asyncio pipeline in Python.
A new store is a plain folder of JSON documents and chunk files, so the writer produces them
directly, following the zarr v3 specification: ``zarr.json`` documents, chunk keys ``c/i/0`` of the
default ``/`` encoding, the ``bytes`` codec (little endian) then optionally Blosc. Tests check the
files are the ones zarr itself writes for the same arrays and values.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

BYTES_CODEC = {"name": "bytes", "configuration": {"endian": "little"}}
DEFAULT_KEYS = {"name": "default", "configuration": {"separator": "/"}}


def compressor(codec: str, itemsize: int) -> dict[str, Any] | None:
    """The Blosc codec of a chunkfit ``--codec`` choice, as a zarr.json entry (None for
    ``none``)."""
    if codec == "none":
        return None
    # On ECG and noisy floats lz4 with bitshuffle compresses fastest; zstd level 1 with byte
    # shuffle is slower and only a little smaller.
    return {
        "name": "blosc",
        "configuration": {
            "typesize": itemsize,
            "cname": codec,
            "clevel": 5 if codec == "lz4" else 1,
            "shuffle": "bitshuffle" if codec == "lz4" else "shuffle",
            "blocksize": 0,
        },
    }


def array_metadata(
    shape: tuple[int, ...],
    dtype: str,
    chunks: tuple[int, ...],
    codec: str,
    dimensions: tuple[str, ...],
) -> dict[str, Any]:
    """The ``zarr.json`` document of one array, with fill value 0 and named dimensions."""
    dt = np.dtype(dtype)
    blosc = compressor(codec, dt.itemsize)
    return {
        "shape": list(shape),
        "data_type": dt.name,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(chunks)}},
        "chunk_key_encoding": DEFAULT_KEYS,
        "fill_value": 0.0 if dt.kind == "f" else 0,
        "codecs": [BYTES_CODEC] + ([blosc] if blosc is not None else []),
        "attributes": {},
        "dimension_names": list(dimensions),
        "zarr_format": 3,
        "node_type": "array",
        "storage_transformers": [],
    }


def group_metadata(
    attributes: dict[str, Any], arrays: dict[str, dict[str, Any]] | None = None
) -> dict[str, Any]:
    """The group's ``zarr.json``; with ``arrays``, their documents inline as zarr's consolidated
    metadata, which zarr and xarray then read instead of each array's own ``zarr.json``."""
    doc: dict[str, Any] = {"attributes": attributes, "zarr_format": 3, "node_type": "group"}
    if arrays is not None:
        doc["consolidated_metadata"] = {
            "kind": "inline",
            "must_understand": False,
            "metadata": arrays,
        }
    return doc


def write_document(path: Path, doc: dict[str, Any]) -> None:
    path.write_text(json.dumps(doc, indent=2))


def chunk_encoder(meta: dict[str, Any]) -> Callable[[np.ndarray], bytes] | None:
    """A function from one whole chunk to its stored bytes, when the array's layout is one this
    module writes (regular grid, default ``/`` keys, one chunk across the other axes, little-endian
    bytes with optional Blosc); else None."""
    codecs = meta.get("codecs", [])
    grid = meta.get("chunk_grid", {})
    if (
        grid.get("name") != "regular"
        or meta.get("chunk_key_encoding") != DEFAULT_KEYS
        or list(grid["configuration"]["chunk_shape"][1:]) != list(meta["shape"][1:])
        or not codecs
        or codecs[0] != BYTES_CODEC
        or len(codecs) > 2
        or (len(codecs) == 2 and codecs[1]["name"] != "blosc")
        or meta.get("storage_transformers")
    ):
        return None
    dtype = np.dtype(meta["data_type"]).newbyteorder("<")
    if len(codecs) == 1:
        return lambda chunk: np.ascontiguousarray(chunk, dtype=dtype).tobytes()
    cfg = codecs[1]["configuration"]
    if cfg.get("typesize") != dtype.itemsize:
        return None
    import numcodecs

    shuffles = {
        "noshuffle": numcodecs.Blosc.NOSHUFFLE,
        "shuffle": numcodecs.Blosc.SHUFFLE,
        "bitshuffle": numcodecs.Blosc.BITSHUFFLE,
    }
    blosc = numcodecs.Blosc(
        cname=cfg["cname"],
        clevel=cfg["clevel"],
        shuffle=shuffles[cfg["shuffle"]],
        blocksize=cfg["blocksize"],
    )
    return lambda chunk: blosc.encode(np.ascontiguousarray(chunk, dtype=dtype))


def write_chunks(
    folder: Path, first: int, rows: np.ndarray, step: int, encode: Callable[[np.ndarray], bytes]
) -> None:
    """Store ``rows`` as the chunks of ``folder`` (an array's folder) from chunk index ``first`` on.

    ``rows`` covers whole chunks but for the last one, which is padded with the fill value 0 as
    zarr pads a chunk that runs past the end of the array.
    """
    keys = folder / "c"
    for rel, data in encode_chunks(first, rows, step, encode).items():
        key = keys.joinpath(*rel.split("/")[1:])
        key.parent.mkdir(parents=True, exist_ok=True)
        key.write_bytes(data)


def encode_chunks(
    first: int, rows: np.ndarray, step: int, encode: Callable[[np.ndarray], bytes]
) -> dict[str, bytes]:
    """``rows`` as chunk objects from chunk index ``first`` on, keyed ``c/i`` or ``c/i/0`` (as
    ``write_chunks``)."""
    out: dict[str, bytes] = {}
    for at in range(0, rows.shape[0], step):
        chunk = rows[at : at + step]
        if chunk.shape[0] < step:
            padded = np.zeros((step,) + chunk.shape[1:], dtype=chunk.dtype)
            padded[: chunk.shape[0]] = chunk
            chunk = padded
        # One chunk spans the other axes, so the key of chunk i is c/i (1-D) or c/i/0 (2-D).
        out["/".join(["c", str(first + at // step), *["0"] * (chunk.ndim - 1)])] = encode(chunk)
    return out
