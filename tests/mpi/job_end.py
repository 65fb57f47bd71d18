"""One run of a Horovod-style script's end, under mpirun (tests/mpi/repeat.sh repeats it).

After the last collectives each rank waits a random time, reads what it has
(hvd.rank(), results of finished operations, allgather_object's result) and
leaves by a random route: hvd.shutdown(), or just returning (the atexit
handler shuts down). Faster ranks stop the job's coordinators while slower
ones are still reading: nothing may raise anywhere, at any point.
"""

import os
import random
import time

import torch

import mgs.torch as hvd


def main():
    torch.set_num_threads(1)
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    rng = random.Random(os.getpid() * 7919 + rank)

    def pause():
        time.sleep(0 if rng.random() < 0.25 else rng.uniform(0, 0.2))

    x = hvd.allreduce(torch.full((3,), float(rank)), op=hvd.Sum, name="step")
    assert x.tolist() == [float(sum(range(size)))] * 3, x
    # The last collectives: an async allgather read late, and allgather_object.
    handle = hvd.allgather_async(torch.full((rank + 1, 2), rank), name="last.rows")
    objs = hvd.allgather_object({"rank": rank, "pid": os.getpid()}, name="last.objs")
    pause()
    assert [o["rank"] for o in objs] == list(range(size)), objs
    assert hvd.rank() == rank and hvd.size() == size
    assert 0 <= hvd.local_rank() < hvd.local_size()
    rows = hvd.synchronize(handle)
    assert rows.shape == (size * (size + 1) // 2, 2), rows.shape
    assert rows[:, 0].tolist() == [float(q) for q in range(size) for _ in range(q + 1)]
    pause()
    if rank == 0:  # the classic "if hvd.rank() == 0: save" after the others may be gone
        assert hvd.rank() == 0
    route = rng.randrange(3)
    if route == 0:
        hvd.shutdown()
    elif route == 1:
        pause()
        assert hvd.size() == size
    print(f"rank {rank}: ok (route {route})", flush=True)


if __name__ == "__main__":
    main()
