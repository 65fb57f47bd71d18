"""Per-step cost of the tf.function integration (tf.py_function over the C ABI), measured.

    mpirun -np 2 --oversubscribe .venv-tf/bin/python examples/tensorflow/overhead.py

On the digits CNN of train_digits.py (batch 16), rank 0 prints the median time
per training step of:
  local        tf.function step with a plain tf.GradientTape (no mgs at all)
  py_identity  the same, gradients passed through one tf.py_function that returns them
               unchanged (the cost of leaving the graph for Python and back)
  function     tf.function step with hvd.DistributedGradientTape (py_function + allreduce)
  eager        eager step with hvd.DistributedGradientTape (.numpy() + allreduce)
  numpy_ar     the allreduce alone, on numpy copies of the gradients (the runtime's part)
so that function - local is the total per-step cost of distribution and
py_identity - local the part due to tf.py_function.
"""

import argparse
import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import mgs.tensorflow as hvd  # noqa: E402
from mgs import _abi  # noqa: E402
from mgs.tensorflow import mpi_ops  # noqa: E402


def make_model():
    return tf.keras.Sequential([
        tf.keras.Input((8, 8, 1)),
        tf.keras.layers.Conv2D(16, 3, padding="same", activation="relu"),
        tf.keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
        tf.keras.layers.MaxPooling2D(2),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(128, activation="relu"),
        tf.keras.layers.Dense(10),
    ])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--json", metavar="PATH")
    args = p.parse_args()
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(2)
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    model = make_model()
    hvd.broadcast_variables(model.variables, 0)
    opt = tf.keras.optimizers.SGD(0.01)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    rng = np.random.default_rng(rank)
    x = tf.constant(rng.random((16, 8, 8, 1), np.float32))
    y = tf.constant(rng.integers(0, 10, 16))
    variables = model.trainable_variables

    def grads_of(distributed):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        if distributed:
            tape = hvd.DistributedGradientTape(tape, name="overhead")
        return tape.gradient(loss, variables)

    def local_step():
        opt.apply_gradients(zip(grads_of(False), variables))

    def identity_step():
        grads = grads_of(False)
        out = tf.py_function(lambda *g: [t.numpy() for t in g], inp=grads, Tout=[g.dtype for g in grads])
        for o, g in zip(out, grads):
            o.set_shape(g.shape)
        opt.apply_gradients(zip(out, variables))

    def dist_step():
        opt.apply_gradients(zip(grads_of(True), variables))

    np_grads = [g.numpy() for g in grads_of(False)]
    names = [f"allreduce.overhead.numpy.{i}" for i in range(len(np_grads))]

    def numpy_allreduce():
        mpi_ops.wait_all(mpi_ops.enqueue_all(
            [lambda a=a, n=n: mpi_ops.np_allreduce(a, _abi.MGS_FLOAT32, n, hvd.Average, flags=_abi.MGS_FLAG_SPARSE_OK)
             for a, n in zip(np_grads, names)]))

    cases = [("local", tf.function(local_step)), ("py_identity", tf.function(identity_step)),
             ("function", tf.function(dist_step)), ("eager", dist_step), ("numpy_ar", numpy_allreduce)]
    results = {}
    for name, fn in cases:
        times = []
        for i in range(args.warmup + args.steps):
            hvd.barrier() if name in ("local", "py_identity") else None  # keep the ranks in step
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        results[name] = 1000 * float(np.median(times[args.warmup:]))
    if rank == 0:
        print(f"TensorFlow {tf.__version__}, {size} ranks, {sum(int(np.prod(v.shape)) for v in variables)} "
              f"parameters in {len(variables)} tensors, median ms/step over {args.steps} steps:")
        for name, ms in results.items():
            print(f"  {name:12s} {ms:8.3f}")
        print(f"  py_function cost (py_identity - local): {results['py_identity'] - results['local']:.3f} ms; "
              f"distribution cost (function - local): {results['function'] - results['local']:.3f} ms")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"ranks": size, "ms_per_step": results}, f, indent=1)


if __name__ == "__main__":
    main()
