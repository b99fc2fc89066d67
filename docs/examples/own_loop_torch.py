"""Bring your own loop in PyTorch: chunkfit's windows as an ``IterableDataset`` whose blocks are
shared out between the ``DataLoader``'s workers (and, under torch.distributed, the ranks).

Run it on a store with event markers: ``python own_loop_torch.py sensor.zarr``.
"""

from __future__ import annotations

import sys

import torch

import chunkfit

STORE = sys.argv[1] if len(sys.argv) > 1 else "sensor.zarr"
WINDOW, CHUNK, EPOCHS = 104, 20_000, 2

if __name__ == "__main__":  # DataLoader workers may import this file again
    data = chunkfit.dataset(
        STORE, kind="torch", window=WINDOW, chunk=CHUNK, batch_size=128, labels="int"
    )
    # persistent_workers stays off: set_epoch reaches the workers as they start each epoch
    loader = torch.utils.data.DataLoader(data, batch_size=None, num_workers=2)
    with chunkfit.open_store(STORE) as store:
        channels = store.n_channels
    model = torch.nn.Sequential(
        torch.nn.Flatten(),
        torch.nn.Linear(WINDOW * channels, 32),
        torch.nn.ReLU(),
        torch.nn.Linear(32, 2),
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(EPOCHS):
        data.set_epoch(epoch)  # chunkfit's block and window order of this epoch
        for x, y, w in loader:
            loss = torch.nn.functional.cross_entropy(model(x), y.long(), reduction="none")
            loss = (loss if w is None else loss * w).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch}: loss {loss.item():.4f}")
