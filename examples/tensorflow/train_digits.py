"""Data-parallel training of a small Keras CNN on scikit-learn's digits with mgs.tensorflow.

    mpirun -np 4 --oversubscribe .venv-tf/bin/python examples/tensorflow/train_digits.py
    MGS_COMPRESSOR=gaussiank MGS_DENSITY=0.01 MGS_DENSE_FALLBACK=0 \
        mpirun -np 4 --oversubscribe .venv-tf/bin/python examples/tensorflow/train_digits.py
    mgsrun -np 4 --compressor gaussiank --density 0.01 -- .venv-tf/bin/python examples/tensorflow/train_digits.py

Each rank trains on its own shard of the training set with a tf.function
training step; hvd.DistributedGradientTape averages the gradients (the runtime
sparsifies them when MGS_COMPRESSOR is set). Rank 0 prints, per epoch, the
training loss (mean over ranks), the test accuracy and the time per epoch.
Written as a Horovod script would be, with `import mgs.tensorflow as hvd`.
"""

import argparse
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402

import mgs  # noqa: E402
import mgs.tensorflow as hvd  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=16, help="per rank")
    p.add_argument("--lr", type=float, default=0.02, help="per rank; scaled by the number of ranks")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--fp16", action="store_true", help="send gradients as float16 (Compression.fp16)")
    p.add_argument("--eager", action="store_true", help="run the training step eagerly, not as a tf.function")
    p.add_argument("--json", metavar="PATH", help="rank 0 writes the per-epoch metrics here")
    p.add_argument("--min-accuracy", type=float, default=None,
                   help="exit with status 1 if the final test accuracy is below this (for CI)")
    return p.parse_args()


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


def load_data(seed):
    """The digits (8x8 images, 10 classes) split 80/20 into train and test, the same on every rank."""
    digits = load_digits()
    x = (digits.images[..., None] / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(y))
    n_test = len(y) // 5
    test, train = order[:n_test], order[n_test:]
    return (x[train], y[train]), (x[test], y[test])


def shard(data, rank, size):
    """This rank's shard; every shard has the same length so every rank takes the same number of steps."""
    x, y = data
    n = len(y) // size
    idx = np.arange(rank, n * size, size)
    return x[idx], y[idx]


def evaluate(model, test, rank, size):
    """Test accuracy over the whole test set, each rank scoring its shard."""
    x, y = test
    idx = np.arange(rank, len(y), size)
    pred = np.argmax(model(x[idx], training=False).numpy(), axis=1)
    counts = hvd.allreduce(tf.constant([int((pred == y[idx]).sum()), len(idx)], tf.int64), op=hvd.Sum,
                           name="eval.counts").numpy()
    return counts[0] / counts[1]


def main():
    args = parse_args()
    tf.config.threading.set_intra_op_parallelism_threads(1)  # ranks share the host's cores
    tf.config.threading.set_inter_op_parallelism_threads(2)
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    tf.random.set_seed(args.seed + rank)  # different on purpose: the broadcast below makes them equal

    train, test = load_data(args.seed)
    x_train, y_train = shard(train, rank, size)
    model = make_model()
    hvd.broadcast_variables(model.variables, root_rank=0)
    steps_per_epoch = (len(y_train) + args.batch_size - 1) // args.batch_size
    schedule = tf.keras.optimizers.schedules.CosineDecay(args.lr * size, steps_per_epoch * args.epochs)
    optimizer = tf.keras.optimizers.SGD(learning_rate=schedule, momentum=0.9)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    compression = hvd.Compression.fp16 if args.fp16 else hvd.Compression.none

    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        tape = hvd.DistributedGradientTape(tape, compression=compression)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    step = train_step if args.eager else tf.function(train_step)

    if rank == 0:
        n_params = sum(int(np.prod(v.shape)) for v in model.trainable_variables)
        print(f"train_digits (TensorFlow {tf.__version__}): {size} ranks, {len(y_train)} training samples per "
              f"rank, {len(test[1])} test samples, {n_params} parameters, batch {args.batch_size}/rank, "
              f"lr {args.lr * size:g}, compressor {os.environ.get('MGS_COMPRESSOR', 'none')}", flush=True)
    history = []
    for epoch in range(1, args.epochs + 1):
        start = time.perf_counter()
        order = np.random.default_rng(args.seed * 1000 + epoch).permutation(len(y_train))
        total, batches = 0.0, 0
        for i in range(0, len(order), args.batch_size):
            idx = order[i:i + args.batch_size]
            loss = step(tf.constant(x_train[idx]), tf.constant(y_train[idx]))
            total += float(loss)
            batches += 1
        elapsed = time.perf_counter() - start
        mean_loss = float(hvd.allreduce(tf.constant(total / batches), name="epoch.loss"))
        accuracy = evaluate(model, test, rank, size)
        stats = mgs.runtime_stats() or {}
        history.append({"epoch": epoch, "loss": mean_loss, "test_accuracy": accuracy, "epoch_s": elapsed,
                        "step_ms": 1000 * elapsed / batches, "runtime_stats": stats})
        if rank == 0:
            traffic = ""
            if stats.get("sparse_dense_bytes"):
                traffic = (f"  sent {stats['sparse_bytes_sent'] / stats['sparse_dense_bytes'] * 100:.2f}% "
                           "of dense gradient bytes so far")
            print(f"epoch {epoch:2d}  loss {mean_loss:.4f}  test accuracy {accuracy * 100:6.2f}%  "
                  f"time {elapsed:.2f} s ({1000 * elapsed / batches:.1f} ms/step){traffic}", flush=True)

    if rank == 0 and args.json:
        with open(args.json, "w") as f:
            json.dump({"ranks": size, "args": vars(args), "compressor": os.environ.get("MGS_COMPRESSOR", "none"),
                       "history": history}, f, indent=1)
    final = history[-1]["test_accuracy"] if history else 0.0
    if args.min_accuracy is not None and final < args.min_accuracy:
        if rank == 0:
            print(f"final test accuracy {final:.4f} is below --min-accuracy {args.min_accuracy}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
