"""Bring your own loop in plain JAX: a ``jax.grad`` step over chunkfit's blocks, no Keras, with the
loop's position saved after every block so that a restarted run continues where it stopped.

Run it on a store with event markers: ``python own_loop_jax.py sensor.zarr``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import chunkfit

STORE = sys.argv[1] if len(sys.argv) > 1 else "sensor.zarr"
CURSOR = Path(sys.argv[2] if len(sys.argv) > 2 else "cursor.json")
WINDOW, CHUNK, EPOCHS, BATCH, LR = 104, 20_000, 2, 128, 0.05


def init(key: jax.Array, inputs: int, classes: int) -> dict[str, jax.Array]:
    k1, k2 = jax.random.split(key)
    return {
        "w1": jax.random.normal(k1, (inputs, 32)) / np.sqrt(inputs),
        "b1": jnp.zeros(32),
        "w2": jax.random.normal(k2, (32, classes)) / np.sqrt(32),
        "b2": jnp.zeros(classes),
    }


def loss(params: dict[str, jax.Array], x: jax.Array, y: jax.Array, w: jax.Array) -> jax.Array:
    h = jax.nn.relu(x.reshape(x.shape[0], -1) @ params["w1"] + params["b1"])
    logp = jax.nn.log_softmax(h @ params["w2"] + params["b2"])
    return jnp.mean(w * -jnp.sum(y * logp, axis=-1))


@jax.jit
def step(params: dict[str, jax.Array], x: jax.Array, y: jax.Array, w: jax.Array) -> dict:
    grads = jax.grad(loss)(params, x, y, w)
    return jax.tree.map(lambda p, g: p - LR * g, params, grads)


blocks = chunkfit.blocks(STORE, window=WINDOW, chunk=CHUNK, epochs=EPOCHS)
if CURSOR.exists():  # a run stopped earlier: continue at its next block
    blocks.set_state(json.loads(CURSOR.read_text()))
params = None
for x, y, w in blocks:
    if params is None:
        params = init(jax.random.key(0), x.shape[1] * x.shape[2], y.shape[1])
    w = np.ones(len(y), np.float32) if w is None else w
    for lo in range(0, len(x), BATCH):
        params = step(params, x[lo : lo + BATCH], y[lo : lo + BATCH], w[lo : lo + BATCH])
    CURSOR.write_text(json.dumps(blocks.get_state()))  # save params alongside in a real run
print("trained", blocks.get_state())
