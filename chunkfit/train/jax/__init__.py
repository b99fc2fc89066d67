"""The JAX engine: Keras on the JAX backend (``KERAS_BACKEND=jax``), driven block by block.

- ``steps``: the compiled element of several batches (gather, standardisation and the model's
  own stateless ``train_step``/``test_step``, one ``lax.scan``);
- ``engine``: ``JaxEngine``, what the training loop drives;
- ``predictor``: scoring blocks of windows with one compiled function.

Importing this package loads neither JAX nor Keras.
"""
