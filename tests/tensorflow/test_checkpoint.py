"""Checkpointing error-feedback residuals: mgs.tensorflow.residual_state()/load_residual_state() and the
Keras DistributedOptimizer's get_residual_state()/set_residual_state().

A sparse run saved at step N, the runtime shut down and started again (as a
resumed job starts it), the state loaded into fresh variables (or a fresh
Keras model and optimizer) and the run continued must end bitwise where the
uninterrupted run ends, on every rank: that needs every rank's residuals and
the runtime's sparse progress (step counter, agreed-index leaders). A state
that does not fit the job is refused on every rank, naming the rank and the
tensor, and nothing is loaded.

Each test restarts mgs with a compressor set (mgs_init reads MGS_* then) and
restores the suite's runtime afterwards.
"""

import contextlib
import os
import pickle
import warnings

import numpy as np
import pytest
import tensorflow as tf

import mgs.tensorflow as hvd
import mgs.tensorflow.keras as hvd_keras
from mgs import _runtime

keras = tf.keras

SPARSE = {"MGS_COMPRESSOR": "topk", "MGS_DENSITY": "0.01", "MGS_CALIBRATION": "off", "MGS_DENSE_FALLBACK": "0",
          "MGS_PLANNER": "single"}
STEPS, SAVE_AT = 6, 3
KERNEL = "0.w_0"  # the residual key of make_vars()'s 64x64 kernel (the bias is under MGS_MIN_SPARSE_ELEMENTS)


@contextlib.contextmanager
def sparse_runtime(**overrides):
    """mgs restarted with SPARSE (plus overrides) for the test; the suite's runtime back afterwards."""
    env = dict(SPARSE, **overrides)
    saved = {k: os.environ.get(k) for k in env}
    # Every rank done with the suite's runtime before any shuts it down: a
    # rank that runs ahead out of a test that ended with local restores would
    # stop the job under a slower rank still restoring (MGS_ERR_SHUTDOWN there,
    # then a hang until ctest's timeout: seen once in a fresh-clone CI run).
    hvd.barrier()
    hvd.shutdown()
    os.environ.update(env)
    try:
        hvd.init()
        yield
        # Every rank done with this runtime before any shuts it down: a rank
        # that leaves first would stop the job under a slower rank's last
        # local residual restore (MGS_ERR_SHUTDOWN there).
        hvd.barrier()
    finally:
        hvd.shutdown()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        hvd.init()


def restart():
    """What a resumed job does: a new runtime (nothing of the old one's state survives)."""
    hvd.barrier()  # as in sparse_runtime: no rank stops the runtime under another's local work
    hvd.shutdown()
    hvd.init()


def batch(s):
    g = np.random.default_rng(1000 * hvd.rank() + s)
    return g.normal(0, 1, (8, 64)).astype(np.float32), g.normal(0, 1, (8, 64)).astype(np.float32)


# ------------------------------------------------------------ GradientTape --

def make_vars():
    g = np.random.default_rng(0)
    return [tf.Variable(g.normal(0, 0.1, (64, 64)).astype(np.float32), name="w"),
            tf.Variable(np.zeros(64, np.float32), name="b")]


def make_step(variables, graph):
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.tanh(x @ variables[0] + variables[1]) - y))
        grads = hvd.DistributedGradientTape(tape, name="ckpt").gradient(loss, variables)
        for v, gr in zip(variables, grads):
            v.assign_sub(0.1 * gr)
    return tf.function(step) if graph else step


def train(variables, step, steps):
    for s in steps:
        step(*batch(s))


def values(variables):
    return [v.numpy().copy() for v in variables]


def assert_bitwise(got, want):
    for i, (a, b) in enumerate(zip(got, want)):
        assert np.array_equal(a, b), (f"rank {hvd.rank()}: variable {i} differs from the uninterrupted run by up "
                                      f"to {np.abs(a - b).max():.3g}")


def tape_checkpoint(graph):
    """Pickled weights and residual state of a run stopped after SAVE_AT steps."""
    variables = make_vars()
    train(variables, make_step(variables, graph), range(SAVE_AT))
    return pickle.dumps({"weights": values(variables), "mgs": hvd.residual_state(variables, name="ckpt")})


@pytest.mark.parametrize("compressor,exchange,graph", [
    ("topk", "auto", True),        # the agreed exchange at 2-4 ranks (the cost model's choice)
    ("topk", "allgather", False),
    ("randomk", "allgather", True),  # the step counter seeds the selection
])
def test_tape_resume_is_bitwise(compressor, exchange, graph):
    with sparse_runtime(MGS_COMPRESSOR=compressor, MGS_EXCHANGE=exchange):
        variables = make_vars()
        train(variables, make_step(variables, graph), range(STEPS))
        want = values(variables)
        restart()
        data = tape_checkpoint(graph)
        state = pickle.loads(data)["mgs"]
        assert state["rank"] == hvd.rank() and state["world_size"] == hvd.size()
        assert sorted(state["residuals"]) == [KERNEL]
        r = state["residuals"][KERNEL]
        assert r.dtype == np.float32 and r.shape == (64, 64) and np.count_nonzero(r) > 0
        restart()
        saved = pickle.loads(data)
        variables = make_vars()
        for v, w in zip(variables, saved["weights"]):
            v.assign(w)
        hvd.load_residual_state(saved["mgs"], variables, name="ckpt")
        train(variables, make_step(variables, graph), range(SAVE_AT, STEPS))
        assert_bitwise(values(variables), want)


# ------------------------------------------------------------------- Keras --

def make_model():
    keras.utils.set_random_seed(0)
    # Named layers: Keras numbers unnamed ones per process, and the residuals are keyed by variable path.
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(64, activation="tanh", name="hidden"),
                              keras.layers.Dense(64, name="out")], name="ckpt")
    opt = hvd_keras.DistributedOptimizer(keras.optimizers.SGD(0.1, momentum=0.9))
    model.compile(optimizer=opt, loss="mse", jit_compile=False)
    return model, opt


def fit(model, steps):
    for s in steps:
        model.train_on_batch(*batch(s))


def test_keras_resume_is_bitwise():
    # Two sparsified kernels: layerwise keeps each in its own bucket, before and after the merge plan.
    with sparse_runtime(MGS_EXCHANGE="agreed", MGS_PLANNER="layerwise"):
        model, _ = make_model()
        fit(model, range(STEPS))
        want = model.get_weights()
        restart()
        model, opt = make_model()
        fit(model, range(SAVE_AT))
        data = pickle.dumps({"weights": model.get_weights(), "optimizer": [v.numpy() for v in opt.variables],
                             "mgs": opt.get_residual_state()})
        restart()
        saved = pickle.loads(data)
        assert sorted(saved["mgs"]["residuals"]) == ["0.ckpt/hidden/kernel", "2.ckpt/out/kernel"]
        model, opt = make_model()
        with pytest.raises(ValueError, match="not built yet"):
            opt.set_residual_state(saved["mgs"])
        opt.build(model.trainable_variables)
        model.set_weights(saved["weights"])
        for v, x in zip(opt.variables, saved["optimizer"]):
            v.assign(x)
        opt.set_residual_state(saved["mgs"])
        fit(model, range(SAVE_AT, STEPS))
        assert_bitwise(model.get_weights(), want)


# ------------------------------------------------------------ bad states --

def kernel_residual():
    out = np.empty(4096, np.float32)
    assert _runtime.residual_copy(f"allreduce.grad.ckpt.{KERNEL}", out.ctypes.data, 4096)
    return out


def bad_state_error(edit):
    """The error load_residual_state() raises for a state changed by edit(state); checks nothing loaded."""
    variables = make_vars()
    step = make_step(variables, graph=False)
    train(variables, step, range(1))
    early = hvd.residual_state(variables, name="ckpt")["sparse_state"]
    train(variables, step, range(1, SAVE_AT))
    state = hvd.residual_state(variables, name="ckpt")
    # Loading any of it would show: zeros where this rank holds a non-zero residual, an earlier step count.
    for r in state["residuals"].values():
        r[...] = 0
    state["sparse_state"] = early
    edit(state)
    residual, progress = kernel_residual(), _runtime.sparse_state()
    assert np.count_nonzero(residual) > 0
    with pytest.raises(ValueError) as info:
        hvd.load_residual_state(state, variables, name="ckpt")
    assert np.array_equal(kernel_residual(), residual) and _runtime.sparse_state() == progress
    # No rank hangs: the next collective runs on every rank, and training goes on.
    assert hvd.allreduce(tf.ones(1), op=hvd.Sum, name="ckpt.after").numpy()[0] == hvd.size()
    train(variables, step, range(SAVE_AT, SAVE_AT + 1))
    return str(info.value)


def test_state_of_another_world_size_is_refused():
    with sparse_runtime():
        msg = bad_state_error(lambda s: s.update(world_size=hvd.size() + 1))
        assert msg.startswith(f"mgs.tensorflow.load_residual_state() on rank {hvd.rank()}: ")
        assert f"saved by a job of {hvd.size() + 1} ranks; this job has {hvd.size()}" in msg


def test_state_of_another_rank_is_refused():
    with sparse_runtime():
        other = (hvd.rank() + 1) % hvd.size()
        msg = bad_state_error(lambda s: s.update(rank=other))
        assert f"rank {hvd.rank()}" in msg and f"residuals of rank {other}" in msg


def test_state_naming_an_unknown_tensor_is_refused():
    with sparse_runtime():
        msg = bad_state_error(lambda s: s["residuals"].update({"0.head": s["residuals"].pop(KERNEL)}))
        assert f"rank {hvd.rank()}" in msg and "tensor '0.head'" in msg and "0.w_0, 1.b_0" in msg


def test_state_with_a_residual_of_another_shape_is_refused():
    with sparse_runtime():
        msg = bad_state_error(lambda s: s["residuals"].update({KERNEL: np.zeros((32, 128), np.float32)}))
        assert f"rank {hvd.rank()}" in msg and f"tensor '{KERNEL}'" in msg
        assert "shape [32, 128]" in msg and "shape [64, 64]" in msg


def test_state_with_a_residual_of_another_dtype_or_version_is_refused():
    with sparse_runtime():
        msg = bad_state_error(lambda s: s["residuals"].update({KERNEL: np.zeros((64, 64), np.float64)}))
        assert f"tensor '{KERNEL}'" in msg and "float64, not a float32 array" in msg
        msg = bad_state_error(lambda s: s.update(version=99))
        assert "not an mgs checkpoint of version 1 (version 99)" in msg


def test_keras_state_of_another_model_is_refused():
    with sparse_runtime():
        model, opt = make_model()
        fit(model, range(2))
        state = opt.get_residual_state()
        other = keras.Sequential([keras.Input((64,)), keras.layers.Dense(64, name="hidden2")], name="ckpt")
        with pytest.raises(ValueError) as info:
            opt.set_residual_state(state, variables=other.trainable_variables)
        msg = str(info.value)
        assert msg.startswith(f"DistributedOptimizer.set_residual_state() on rank {hvd.rank()}: ")
        assert "tensor '0.ckpt/hidden/kernel'" in msg and "0.ckpt/hidden2/kernel" in msg


def test_no_state_warns_and_starts_residuals_from_zero():
    with sparse_runtime():
        variables = make_vars()
        train(variables, make_step(variables, graph=False), range(SAVE_AT))
        assert np.count_nonzero(kernel_residual()) > 0
        with pytest.warns(RuntimeWarning, match="residuals start from zero"):
            hvd.load_residual_state(None, variables, name="ckpt")
        assert np.count_nonzero(kernel_residual()) == 0


def test_residual_state_needs_mgs_running():
    with sparse_runtime():
        variables = make_vars()
        hvd.shutdown()
        try:
            with pytest.raises(ValueError, match="mgs is not running"):
                hvd.residual_state(variables)
            with pytest.raises(ValueError, match="need mgs running: call init"):
                hvd.load_residual_state({"version": 1, "residuals": {}}, variables)
        finally:
            hvd.init()


@pytest.mark.skipif((_runtime.init_settings().get("MGS_COMPRESSOR") or "none") != "none",
                    reason="the suite runs with a compressor set")
def test_dense_job_state_round_trips():
    """Without a compressor there are no residuals; the state is still there, and any rank may load it."""
    variables = make_vars()
    train(variables, make_step(variables, graph=False), range(2))
    state = hvd.residual_state(variables, name="ckpt")
    assert state["residuals"] == {}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # dense: nothing to warn about
        hvd.load_residual_state(state, variables, name="ckpt")
        hvd.load_residual_state(None, variables, name="ckpt")
        state.update(rank=0, world_size=hvd.size() + 1)  # every rank loads rank 0's state, in a job of any size
        hvd.load_residual_state(state, variables, name="ckpt")


def test_process_set_gradients_are_sparsified_and_their_residuals_saved():
    """A tape reducing in a process set sparsifies with the set's own pipeline: the residuals are the
    set's (residual_state(process_set=...)), not the global set's, and the set's buckets are counted."""
    import mgs
    if hvd.size() < 4:
        pytest.skip("needs a process set of 2 ranks or more besides the global set (4 ranks)")
    with sparse_runtime():
        even = hvd.add_process_set([r for r in range(hvd.size()) if r % 2 == 0])
        try:
            if even.included():
                variables = make_vars()

                def step(x, y):
                    with tf.GradientTape() as tape:
                        loss = tf.reduce_mean(tf.square(tf.tanh(x @ variables[0] + variables[1]) - y))
                    grads = hvd.DistributedGradientTape(tape, name="ps", process_set=even).gradient(loss, variables)
                    for v, gr in zip(variables, grads):
                        v.assign_sub(0.1 * gr)
                before = mgs.runtime_stats()["set_sparse_buckets"]
                train(variables, step, range(2))
                assert mgs.runtime_stats()["set_sparse_buckets"] - before == 2
                state = hvd.residual_state(variables, name="ps", process_set=even)
                assert KERNEL in state["residuals"] and np.abs(state["residuals"][KERNEL]).sum() > 0
                assert hvd.residual_state(variables, name="ps")["residuals"] == {}, \
                    "a set's residual found under the global set's name"
                # Loading it back into the set's residuals: what was saved is what is kept.
                hvd.load_residual_state(state, variables, name="ps", process_set=even)
                again = hvd.residual_state(variables, name="ps", process_set=even)
                assert np.array_equal(again["residuals"][KERNEL], state["residuals"][KERNEL])
        finally:
            hvd.barrier()
            hvd.remove_process_set(even)
