"""Keras callbacks (Horovod's names)."""

import tensorflow as tf

from . import functions


class BroadcastGlobalVariablesCallback(tf.keras.callbacks.Callback):
    """Make every rank start from root_rank's weights.

    The model's variables are broadcast when training begins; after the first
    batch the model's and the optimizer's variables are broadcast again (as in
    Horovod), since optimizer slots only exist once a step has run.
    """

    def __init__(self, root_rank=0):
        super().__init__()
        self.root_rank = root_rank
        self.broadcast_done = False

    def _broadcast(self, variables, prefix):
        functions.broadcast_variables(list(variables), self.root_rank, prefix=prefix)

    def on_train_begin(self, logs=None):
        self._broadcast(self.model.variables, "keras.model.begin")

    def on_train_batch_end(self, batch, logs=None):
        if self.broadcast_done:
            return
        opt = getattr(self.model, "optimizer", None)
        opt_vars = list(getattr(opt, "variables", [])) if opt is not None else []
        if callable(opt_vars):
            opt_vars = list(opt_vars())
        self._broadcast(list(self.model.variables) + opt_vars, "keras.first_batch")
        self.broadcast_done = True
