"""Bring your own loop with Keras: ``model.fit`` on each block, then ``model.fit`` on a
``tf.data`` dataset of chunkfit's windows.

Run it on a store with event markers: ``python own_loop_keras.py sensor.zarr``
(``chunkfit synth sensor.zarr`` makes one).
"""

from __future__ import annotations

import sys

import keras

import chunkfit

STORE = sys.argv[1] if len(sys.argv) > 1 else "sensor.zarr"
WINDOW, CHUNK, EPOCHS = 104, 20_000, 2


def compiled(channels: int, classes: int) -> keras.Model:
    model = chunkfit.build_model("baseline-cnn", WINDOW, channels, classes)
    # several batches per compiled call: for a small model, Keras's cost per step dominates
    model.compile(
        optimizer="adam",
        loss="categorical_crossentropy",
        metrics=["accuracy"],
        steps_per_execution=16,
    )
    return model


with chunkfit.open_store(STORE) as store:
    channels = store.n_channels

# 1. One model.fit per block: every training window once per epoch, in chunkfit's shuffled order,
#    standardised with the training split's statistics, weighted by class when a class is rare.
model = compiled(channels, 2)
for epoch in range(EPOCHS):
    for x, y, w in chunkfit.blocks(STORE, window=WINDOW, chunk=CHUNK, epoch=epoch):
        model.fit(x, y, sample_weight=w, batch_size=128, epochs=1, verbose=0)

# 2. model.fit on chunkfit.dataset: a tf.data.Dataset whose every pass is the next epoch.
train = chunkfit.dataset(STORE, window=WINDOW, chunk=CHUNK, batch_size=128)
val = chunkfit.dataset(STORE, window=WINDOW, chunk=CHUNK, batch_size=128, split="validation")
model = compiled(channels, 2)
# shuffle=False: the windows come shuffled already, in chunkfit's order
history = model.fit(train, validation_data=val, epochs=EPOCHS, shuffle=False, verbose=0)
print("val_accuracy", history.history["val_accuracy"])
