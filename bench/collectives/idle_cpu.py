"""CPU an mgs job burns while it has nothing to do (between steps, during forward).

Run under mpirun with the Python that has torch; every rank initialises mgs,
runs one allreduce, then sleeps and reports the process CPU time used while
idle (user + system, all threads: the coordinator, MPI's progress thread).

    mpirun -np 4 --oversubscribe /usr/bin/python3 bench/collectives/idle_cpu.py [--seconds 5]

A training job's cores are all busy with forward/backward; every idle percent
here is taken from them.
"""
import argparse
import resource
import time

import torch

import mgs
import mgs.torch as hvd


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=5.0)
    args = ap.parse_args()
    hvd.init()
    hvd.allreduce(torch.ones(1000), name="idle_cpu.warm")
    before = resource.getrusage(resource.RUSAGE_SELF)
    cycles0 = (mgs.runtime_stats() or {}).get("idle_cycles", 0)
    time.sleep(args.seconds)
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    cycles = (mgs.runtime_stats() or {}).get("idle_cycles", 0) - cycles0
    print(f"rank {hvd.rank()}: idle {args.seconds:.1f} s, process CPU {cpu:.3f} s "
          f"({100 * cpu / args.seconds:.1f}% of a core), {cycles} idle coordinator cycles", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
