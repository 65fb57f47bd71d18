"""Checkpointing error-feedback residuals: DistributedOptimizer.state_dict()/load_state_dict().

A sparse run saved at step N, the runtime shut down and started again (as a
resumed job starts it), the state loaded into a fresh model and optimizer, and
the run continued must end bitwise where the uninterrupted run ends, on every
rank. That needs the residuals and the runtime's sparse progress
(mgs_sparse_state_copy: the step counter, which seeds randomk, and the
agreed-index exchange's leaders, which decide whose selection is sent): with
the residuals alone the run differs, because N = 3 steps moved every agreed
bucket's leader on. A checkpoint that does not fit the job is refused on every
rank, naming the rank and the tensor, and nothing is loaded.

Each test restarts mgs with a compressor set (mgs_init reads MGS_* then) and
restores the suite's runtime afterwards.
"""

import contextlib
import io
import os
import warnings

import pytest
import torch
from torch import nn

import mgs.torch as hvd
from mgs import _lib, _runtime

SPARSE = {"MGS_COMPRESSOR": "topk", "MGS_DENSITY": "0.01", "MGS_CALIBRATION": "off", "MGS_DENSE_FALLBACK": "0",
          "MGS_PLANNER": "single"}
STEPS, SAVE_AT = 7, 3


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
        # Every rank done with this runtime before any shuts it down: a test
        # with no collective of its own would otherwise race the next one's
        # restart on a faster rank.
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


def make(layers=1, momentum_correction="auto"):
    """A model with `layers` sparsified weights of 4096 elements (MGS_MIN_SPARSE_ELEMENTS) and dense biases."""
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(64, 64) for _ in range(layers)])
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                   named_parameters=model.named_parameters(), momentum_correction=momentum_correction)
    return model, opt


def train(model, opt, steps):
    for s in steps:
        g = torch.Generator().manual_seed(1000 * hvd.rank() + s)
        x, y = torch.randn(8, 64, generator=g), torch.randn(8, 64, generator=g)
        opt.zero_grad()
        ((model(x) - y) ** 2).mean().backward()
        opt.step()


def params(model):
    return [p.detach().clone() for p in model.parameters()]


def uninterrupted(layers=1, momentum_correction="auto"):
    model, opt = make(layers, momentum_correction)
    train(model, opt, range(STEPS))
    return params(model)


def saved_checkpoint(layers=1):
    """torch.save'd bytes of a run stopped after SAVE_AT steps."""
    model, opt = make(layers)
    train(model, opt, range(SAVE_AT))
    buf = io.BytesIO()
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, buf)
    return buf.getvalue()


def resumed(data, layers=1):
    state = torch.load(io.BytesIO(data))
    model, opt = make(layers)
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["optimizer"])
    train(model, opt, range(SAVE_AT, STEPS))
    return params(model)


def assert_bitwise(got, want):
    for i, (a, b) in enumerate(zip(got, want)):
        assert torch.equal(a, b), (f"rank {hvd.rank()}: parameter {i} differs from the uninterrupted run by up to "
                                   f"{(a - b).abs().max().item():.3g}")


@pytest.mark.parametrize("compressor,exchange,layers,planner", [
    ("topk", "auto", 1, "single"),        # the agreed exchange at 2-4 ranks (the cost model's choice)
    ("topk", "allgather", 1, "single"),
    ("randomk", "allgather", 1, "single"),  # the step counter seeds the selection
    ("topk", "agreed", 2, "layerwise"),   # two sparse tensors, each its own bucket
])
def test_resume_from_state_dict_is_bitwise(compressor, exchange, layers, planner):
    with sparse_runtime(MGS_COMPRESSOR=compressor, MGS_EXCHANGE=exchange, MGS_PLANNER=planner):
        want = uninterrupted(layers)
        restart()
        data = saved_checkpoint(layers)
        state = torch.load(io.BytesIO(data))["optimizer"]["mgs"]
        assert state["rank"] == hvd.rank() and state["world_size"] == hvd.size()
        assert sorted(state["residuals"]) == [f"{i}.weight" for i in range(layers)]  # the biases are dense
        for t in state["residuals"].values():
            assert t.dtype == torch.float32 and t.shape == (64, 64) and t.count_nonzero() > 0
        restart()
        assert_bitwise(resumed(data, layers), want)


def test_c_abi_round_trip_is_bitwise():
    """mgs_residual_copy/restore and mgs_sparse_state_copy/restore alone (no state_dict) continue bitwise.
    Momentum correction off: its velocities are the Python optimizer's state (state_dict()), not the C ABI's."""
    with sparse_runtime(MGS_EXCHANGE="agreed"):
        want = uninterrupted(momentum_correction=False)
        restart()
        model, opt = make(momentum_correction=False)
        train(model, opt, range(SAVE_AT))
        weights, opt_state = model.state_dict(), opt._base_state_dict()
        residual = torch.empty(4096, dtype=torch.float32)
        assert _runtime.residual_copy("allreduce.0.weight", residual.data_ptr(), 4096)
        blob = _runtime.sparse_state()
        restart()
        model, opt = make(momentum_correction=False)
        model.load_state_dict(weights)
        opt._load_base_state_dict(opt_state)
        _runtime.residual_restore("allreduce.0.weight", residual.data_ptr(), 4096)
        back = torch.empty(4096, dtype=torch.float32)
        assert _runtime.residual_copy("allreduce.0.weight", back.data_ptr(), 4096) and torch.equal(back, residual)
        _runtime.restore_sparse_state(blob)
        assert _runtime.sparse_state() == blob
        train(model, opt, range(SAVE_AT, STEPS))
        assert_bitwise(params(model), want)


def test_sparse_state_restore_refuses_bad_bytes():
    with sparse_runtime():
        blob = _runtime.sparse_state()
        with pytest.raises(ValueError, match=rf"rank {hvd.rank()}: .*not a sparse state"):
            _runtime.restore_sparse_state(b"not a state")
        other = bytearray(blob)
        other[8:12] = (hvd.size() + 1).to_bytes(4, "little")  # the world size it was saved with
        with pytest.raises(ValueError, match=rf"saved by a job of {hvd.size() + 1} ranks; this job has {hvd.size()}"):
            _runtime.restore_sparse_state(bytes(other))
        with pytest.raises(ValueError, match="truncated"):
            _runtime.restore_sparse_state(blob[:-1])
        _runtime.restore_sparse_state(blob)


def bad_checkpoint_error(edit):
    """The error load_state_dict() raises for a checkpoint changed by edit(mgs entry); checks nothing loaded
    (in SGD's momentum buffer: momentum correction off, so that the wrapped SGD keeps one)."""
    model, opt = make(momentum_correction=False)
    train(model, opt, range(SAVE_AT))
    state = opt.state_dict()
    # Loading any of it would show: zeros where this rank holds non-zero state.
    for t in state["mgs"]["residuals"].values():
        t.zero_()
    state["state"] = {k: dict(v) for k, v in state["state"].items()}  # torch's state_dict() shares these dicts
    state["state"][0]["momentum_buffer"] = torch.zeros(64, 64)
    edit(state["mgs"])
    momentum = opt._base_state_dict()["state"][0]["momentum_buffer"].clone()
    assert momentum.count_nonzero() > 0
    name = "allreduce.0.weight"
    residual = torch.empty(4096, dtype=torch.float32)
    assert _runtime.residual_copy(name, residual.data_ptr(), 4096)
    with pytest.raises(ValueError) as info:
        opt.load_state_dict(state)
    after = torch.empty(4096, dtype=torch.float32)
    assert _runtime.residual_copy(name, after.data_ptr(), 4096) and torch.equal(after, residual)
    assert torch.equal(opt._base_state_dict()["state"][0]["momentum_buffer"], momentum)
    # No rank hangs: the next collective runs on every rank, and training goes on.
    assert hvd.allreduce(torch.ones(1), op=hvd.Sum).item() == hvd.size()
    train(model, opt, range(SAVE_AT, SAVE_AT + 1))
    return str(info.value)


def test_checkpoint_of_another_world_size_is_refused():
    with sparse_runtime():
        msg = bad_checkpoint_error(lambda m: m.update(world_size=hvd.size() + 1))
        assert f"rank {hvd.rank()}" in msg
        assert f"saved by a job of {hvd.size() + 1} ranks; this job has {hvd.size()}" in msg


def test_checkpoint_of_another_rank_is_refused():
    with sparse_runtime():
        other = (hvd.rank() + 1) % hvd.size()
        msg = bad_checkpoint_error(lambda m: m.update(rank=other))
        assert f"rank {hvd.rank()}" in msg and f"residuals of rank {other}" in msg


def test_checkpoint_naming_an_unknown_tensor_is_refused():
    with sparse_runtime():
        msg = bad_checkpoint_error(lambda m: m["residuals"].update({"head.weight": m["residuals"].pop("0.weight")}))
        assert f"rank {hvd.rank()}" in msg and "tensor 'head.weight'" in msg and "0.weight" in msg


def test_checkpoint_with_a_residual_of_another_shape_is_refused():
    with sparse_runtime():
        msg = bad_checkpoint_error(lambda m: m["residuals"].update({"0.weight": torch.zeros(32, 128)}))
        assert f"rank {hvd.rank()}" in msg and "tensor '0.weight'" in msg
        assert "shape [32, 128]" in msg and "shape [64, 64]" in msg


def test_plain_optimizer_state_warns_and_starts_residuals_from_zero():
    with sparse_runtime():
        model, opt = make()
        train(model, opt, range(SAVE_AT))
        plain = opt._base_state_dict()
        assert "mgs" not in plain and "mgs" in opt.state_dict()
        with pytest.warns(RuntimeWarning, match="residuals start from zero"):
            opt.load_state_dict(plain)
        residual = torch.empty(4096, dtype=torch.float32)
        assert _runtime.residual_copy("allreduce.0.weight", residual.data_ptr(), 4096)
        assert residual.count_nonzero() == 0


def test_state_dict_refused_while_gradients_are_in_flight():
    with sparse_runtime():
        model, opt = make()
        opt.zero_grad()
        model(torch.ones(2, 64)).sum().backward()
        with pytest.raises(AssertionError, match="between steps"):
            opt.state_dict()
        opt.step()
        assert "mgs" in opt.state_dict()


def test_broadcast_optimizer_state_leaves_each_ranks_residuals():
    with sparse_runtime():
        model, opt = make()
        train(model, opt, range(SAVE_AT))
        mine = opt.state_dict()["mgs"]["residuals"]["0.weight"]
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no "residuals start from zero" on the receiving ranks
            hvd.broadcast_optimizer_state(opt, root_rank=0)
        after = opt.state_dict()["mgs"]["residuals"]["0.weight"]
        assert torch.equal(after, mine)
        everyone = hvd.allgather_object(mine, name="checkpoint.residuals")
        if hvd.size() > 1:
            assert not torch.equal(everyone[0], everyone[1])  # per rank: never broadcast


@pytest.mark.skipif((_runtime.init_settings().get("MGS_COMPRESSOR") or "none") != "none",
                    reason="the suite runs with a compressor set")
def test_dense_job_state_dict_round_trips():
    """Without a compressor there are no residuals; the entry is still there and loads."""
    model, opt = make()
    train(model, opt, range(2))
    state = opt.state_dict()
    assert state["mgs"]["residuals"] == {}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        opt.load_state_dict(state)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # dense: nothing to warn about
        opt.load_state_dict(opt._base_state_dict())
        # Horovod's pattern: every rank loads rank 0's file, maybe in a job of another size.
        state["mgs"].update(rank=0, world_size=hvd.size() + 1)
        opt.load_state_dict(state)
