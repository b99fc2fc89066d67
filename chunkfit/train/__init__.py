"""Training: a store's windows, in blocks planned by chunkfit.core, trained by ``model.fit``
block by block.

The modules, in the order a run goes through them:

- ``fit``: ``chunkfit.fit``, the keyword facade: options checked, store and run folder opened;
- ``runsetup``: a run set up: engine, class weights, blocks, checkpoints, run.json's settings;
- ``rendezvous``: the workers of a distributed run check each other and agree on a checkpoint;
- ``loop``: the epoch loop (``Trainer``); ``thresholds``: the decision threshold picked on the
  validation split at every epoch's end and at the run's end; ``verdict``: the run's ``warning:``
  lines and ``--fail-under`` targets;
- ``budget``: ``--memory-budget`` turned into a block size;
- ``normalize``: inputs in any units (standardisation from the training split, saved in the model);
- ``weights``: class weights for rare events;
- ``models``: the built-in models, ``.keras`` files and ``module:function``;
- ``backend``: which Keras backend, hence which engine, the process runs;
- ``tensorflow/``: the default engine (threads, input pipeline, the multi-batch ``Stepper``);
- ``jax/``: the engine on the JAX backend (one jitted step per batch, gather inside);
- ``callbacks``: the run's callbacks across block-wise ``fit`` calls;
- ``progress``: progress reports; ``record``: run.json; ``cursor``: where a run is;
- ``runfolder`` (``remotefolder`` on object storage): the run folder and its lock;
  ``checkpoint``: checkpoints on disk; ``keras_state``: what Keras state a checkpoint captures;
  ``resume``: checkpointing and resuming.

Windows, labels, blocks and the plan of a run live in chunkfit.core, shared with scoring.
Importing this package loads no TensorFlow.
"""
