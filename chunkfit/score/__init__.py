"""Scoring: a trained run's model streamed over a store, block by block.

- ``runs``: a run folder or ``.keras`` file, its window settings and labels, checked cheaply;
- ``scorer``: a model's compiled scoring function on the engine of Keras's backend;
- ``evaluate``: ``chunkfit evaluate``; ``predict`` and ``outputs``: ``chunkfit predict`` and what it
  writes;
- ``follow``: ``chunkfit predict --follow``, a growing store scored as its samples are committed.

The loop over a store, the figures, detections and threshold choice are shared with training and
live in chunkfit.core (``scoring``, ``metrics``, ``detect``, ``events``, ``threshold``).
"""
