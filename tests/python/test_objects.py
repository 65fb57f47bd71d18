"""broadcast_object and allgather_object."""

import torch

import mgs.torch as hvd


def test_broadcast_object_from_every_root(rank, size):
    for root in range(size):
        obj = {"rank": rank, "data": list(range(rank * 100)), "t": torch.full((2,), float(rank))}
        got = hvd.broadcast_object(obj, root_rank=root)
        assert got["rank"] == root and got["data"] == list(range(root * 100))
        assert torch.equal(got["t"], torch.full((2,), float(root)))


def test_broadcast_object_only_root_needs_the_object(rank):
    got = hvd.broadcast_object(("config", 3.5) if rank == 0 else None, 0, name="config")
    assert got == ("config", 3.5)


def test_allgather_object(rank, size):
    got = hvd.allgather_object({"rank": rank, "payload": "x" * (rank * 37)})
    assert got == [{"rank": r, "payload": "x" * (r * 37)} for r in range(size)]
    assert hvd.allgather_object(None, name="nones") == [None] * size
