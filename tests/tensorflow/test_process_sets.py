"""Process sets in mgs.tensorflow: agreed ids, every collective and its gradient restricted to a set
(eagerly and in tf.function), DistributedGradientTape and the Keras DistributedOptimizer over a
set, static sets from init(), and the errors: a rank outside a set fails the op on every rank of
the set that submits it, naming the tensor and the rank; removed and unregistered sets."""

import numpy as np
import pytest
import tensorflow as tf

import mgs.tensorflow as hvd
import mgs.tensorflow.keras as hvd_keras
from mgs import _process_sets

MODES = ["eager", "function"]


def run(mode, fn, *args):
    if mode == "eager":
        return fn(*args)
    return tf.function(fn, autograph=False)(*args)


@pytest.fixture
def halves(rank, size):
    """The even and the odd ranks as two sets (the odd set is empty at size 1), removed afterwards."""
    even = hvd.add_process_set([r for r in range(size) if r % 2 == 0])
    odd = hvd.add_process_set([r for r in range(size) if r % 2 == 1]) if size > 1 else None
    yield (even if rank % 2 == 0 else odd), even, odd
    hvd.barrier()
    if odd is not None:
        assert hvd.remove_process_set(odd)
    assert hvd.remove_process_set(even)


def test_sets_have_agreed_ids_and_know_their_ranks(rank, size, halves):
    mine, even, odd = halves
    ids = hvd.allgather_object((even.process_set_id, odd and odd.process_set_id), name="ps.ids")
    assert all(i == ids[0] for i in ids) and 0 not in ids[0]
    assert mine.included() and mine.rank() == rank // 2 and mine.size() == len(mine.ranks)
    other = odd if mine is even else even
    if other is not None:
        assert not other.included() and other.rank() == -1
    assert hvd.global_process_set.process_set_id == 0 and hvd.global_process_set.size() == size


@pytest.mark.parametrize("mode", MODES)
def test_collectives_in_a_set(mode, rank, size, halves):
    mine, _, _ = halves
    members, n, me = mine.ranks, len(mine.ranks), mine.rank()

    def collectives(x):
        return [
            hvd.allreduce(x, op=hvd.Sum, name="ps.coll", process_set=mine),  # the same name in both sets
            hvd.allreduce(x, name="ps.avg", process_set=mine),  # divides by the set's size
            hvd.grouped_allreduce([x, 2 * x], op=hvd.Sum, name="ps.gar", process_set=mine)[1],
            hvd.allgather(tf.reshape(x[:1], [1]), name="ps.gather", process_set=mine),
            hvd.grouped_allgather([x[:1], tf.reshape(x[:2], [1, 2])], name="ps.gag", process_set=mine)[1],
            hvd.broadcast(x, members[-1], name="ps.bcast", process_set=mine),  # root: a world rank
            hvd.alltoall(tf.range(n) + 10 * rank, [1] * n, name="ps.a2a", process_set=mine)[0],
            hvd.alltoall(tf.range(n) + 10 * rank, name="ps.a2a.equal", process_set=mine),
            hvd.reducescatter(tf.tile(x[:1], [2 * n]), op=hvd.Sum, name="ps.rs", process_set=mine),
            hvd.grouped_reducescatter([tf.tile(x[:1], [n])], op=hvd.Average, name="ps.grs", process_set=mine)[0],
            hvd.allreduce(x, op=hvd.Max, name="ps.max", process_set=mine),
        ]
    outs = [o.numpy() for o in run(mode, collectives, tf.fill([3], float(rank + 1)))]
    total = float(sum(r + 1 for r in members))
    assert outs[0].tolist() == [total] * 3
    assert outs[1].tolist() == [total / n] * 3
    assert outs[2].tolist() == [2 * total] * 3
    assert outs[3].tolist() == [float(r + 1) for r in members]
    assert outs[4].tolist() == [[float(r + 1)] * 2 for r in members]
    assert outs[5].tolist() == [float(members[-1] + 1)] * 3
    assert outs[6].tolist() == [10 * r + me for r in members]
    assert outs[7].tolist() == [10 * r + me for r in members]
    assert outs[8].tolist() == [total] * 2
    assert outs[9].tolist() == [total / n]
    assert outs[10].tolist() == [float(members[-1] + 1)] * 3
    hvd.barrier(process_set=mine)
    assert hvd.broadcast_object({"from": rank}, root_rank=members[-1], process_set=mine) == {"from": members[-1]}
    assert hvd.allgather_object(rank, process_set=mine) == members
    v = tf.Variable(float(rank))
    hvd.broadcast_variables([v], root_rank=members[0], process_set=mine, prefix="ps.vars")
    assert v.numpy() == float(members[0])
    for ps in [mine, None]:  # unnamed ops of a set do not shift the global set's names
        hvd.allreduce(tf.ones([1]), **({} if ps is None else {"process_set": ps}))


@pytest.mark.parametrize("mode", MODES)
def test_gradients_in_a_set(mode, rank, size, halves):
    mine, _, _ = halves
    members, n, me = mine.ranks, len(mine.ranks), mine.rank()
    weight = float(rank + 1)
    mean = sum(r + 1 for r in members) / n
    x = tf.Variable(tf.ones([2 * n]))

    def grads():
        with tf.GradientTape() as tape:
            losses = [
                hvd.allreduce(x, op=hvd.Sum, name="ps.g.ar", process_set=mine),
                hvd.allgather(x, name="ps.g.ag", process_set=mine),
                hvd.broadcast(x, members[0], name="ps.g.bc", process_set=mine),
                hvd.alltoall(x, name="ps.g.a2a", process_set=mine),
                hvd.reducescatter(x, op=hvd.Sum, name="ps.g.rs", process_set=mine),
            ]
            loss = tf.add_n([tf.reduce_sum(t) for t in losses]) * weight
        return tape.gradient(loss, x)
    g = run(mode, grads).numpy()
    expected = (
        n * mean                                           # allreduce Sum: the Sum of the weights
        + mean                                             # allgather: this rank's rows, averaged
        + (mean if rank == members[0] else 0.0)            # broadcast: the root gets the average
        + np.repeat([float(r + 1) for r in members], 2)    # alltoall: each part's receiver's weight
        + n * np.repeat([float(r + 1) for r in members], 2)  # reducescatter Sum: allgathered, times n
    )
    np.testing.assert_allclose(g, expected * np.ones(2 * n))
    del me


def _grads(variables, x):
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum((x @ variables[0]) ** 2)
    return tape, loss


@pytest.mark.parametrize("mode", MODES)
def test_gradient_tape_in_a_set(mode, rank, size, halves):
    _, even, _ = halves
    w = tf.Variable(tf.ones([3, 2]))

    def step(x):
        tape, loss = _grads([w], x)
        return hvd.DistributedGradientTape(tape, process_set=even, name="ps.tape").gradient(loss, [w])[0]
    x_of = lambda r: np.full((1, 3), float(r + 1), np.float32)  # noqa: E731
    local = lambda r: 2 * x_of(r).T @ (x_of(r) @ np.ones((3, 2), np.float32))  # noqa: E731
    g = run(mode, step, tf.constant(x_of(rank))).numpy()
    if rank % 2 == 0:
        want = sum(local(r) for r in even.ranks) / len(even.ranks)
    else:
        want = local(rank)  # outside the set: this rank's own gradient
    np.testing.assert_allclose(g, want, rtol=1e-6)


def test_keras_optimizer_in_a_set(rank, size, halves):
    _, even, _ = halves
    w = tf.Variable(tf.zeros([2]))
    opt = hvd_keras.DistributedOptimizer(tf.keras.optimizers.SGD(learning_rate=1.0), process_set=even,
                                         name="ps.keras")
    opt.apply_gradients([(tf.fill([2], float(rank)), w)])
    want = -np.mean(even.ranks) if rank % 2 == 0 else -float(rank)
    np.testing.assert_allclose(w.numpy(), [want] * 2)


@pytest.mark.parametrize("kind", ["allreduce", "alltoall", "function"])
def test_rank_outside_the_set_fails_on_every_rank_that_submits(kind, rank, size):
    if size < 3:
        pytest.skip("needs a set of two ranks and a rank outside it")
    pair = hvd.add_process_set([0, 2])
    name = f"ps.outside.{kind}"
    ops = {
        "allreduce": lambda: hvd.allreduce(tf.ones([2]), name=name, process_set=pair),
        "alltoall": lambda: hvd.alltoall(tf.ones([2]), name=name, process_set=pair),
        "function": lambda: tf.function(lambda t: hvd.reducescatter(t, name=name, process_set=pair))(tf.ones([2])),
    }
    messages = []

    def attempt():
        try:
            ops[kind]()
        except (ValueError, tf.errors.OpError) as e:
            messages.append(str(e))
    if rank == 1:  # first, so that the set's ranks hold its report before they submit
        attempt()
    hvd.barrier()
    if rank in (0, 2):
        attempt()
    hvd.barrier()
    if rank in (0, 1, 2):
        assert len(messages) == 1, messages
        msg = messages[0]
        assert "rank 1" in msg and name in msg and "not in" in msg, msg
    assert hvd.remove_process_set(pair)


def test_set_errors(rank, size):
    ps = hvd.add_process_set([0])
    with pytest.raises(ValueError, match="has these ranks already"):
        hvd.add_process_set([0])
    with pytest.raises(ValueError, match="is not in"):
        hvd.broadcast(tf.ones([1]), size - 1 if size > 1 else 5, process_set=ps)
    assert hvd.remove_process_set(ps)
    assert not hvd.remove_process_set(ps)  # removed already
    assert not hvd.remove_process_set(hvd.global_process_set)
    for call in (lambda: hvd.allreduce(tf.ones([1]), process_set=ps),
                 lambda: hvd.alltoall(tf.ones([1]), process_set=ps),
                 lambda: hvd.reducescatter(tf.ones([1]), process_set=hvd.ProcessSet([0])),
                 lambda: hvd.DistributedGradientTape(tf.GradientTape(), process_set=ps)):
        with pytest.raises(ValueError, match="not registered"):
            call()


def test_static_sets_from_init(rank, size):
    hvd.barrier()  # every rank is done with the tests before: shutdown() stops them all
    hvd.shutdown()
    static = hvd.ProcessSet([0])
    hvd.init(process_sets=[static, [r for r in range(size) if r != 0]] if size > 1 else [static])
    try:
        assert static.process_set_id is not None
        assert _process_sets.set_size(static.process_set_id) == 1
        if rank == 0:
            assert hvd.allreduce(tf.ones([1]), op=hvd.Sum, process_set=static).numpy().tolist() == [1.0]
    finally:
        hvd.barrier()
        hvd.shutdown()
        hvd.init()
    assert static.process_set_id is None  # a new runtime starts with the global set alone
