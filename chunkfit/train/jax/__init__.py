"""The JAX engine: Keras on the JAX backend (``KERAS_BACKEND=jax``), driven block by block.

- ``steps``: the compiled step (gather, standardisation and the model's own stateless
  ``train_step``/``test_step``), one call per batch or a ``lax.scan`` over an element's batches;
- ``loopchoice``: which of the two, timed in the run (``--jax-loop``);
- ``engine``: ``JaxEngine``, what the training loop drives (chunkfit.train.engines.Engine);
- ``predictor``: scoring blocks of windows with one compiled function;
- ``options``: what this engine refuses, checked before JAX loads.

Importing this package loads neither JAX nor Keras, and nothing of chunkfit.train.tensorflow.
"""
