"""Run this folder's TensorFlow tests on one rank of an mpirun job.

Rank 0 reports normally. Other ranks write their report (and the runtime's
stderr) to a temporary file and print it only if they failed, so the ranks'
outputs do not interleave.
Usage: mpirun -np N .venv-tf/bin/python run_pytest.py [pytest args]
"""

import os
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before TensorFlow is imported by conftest

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


def world_rank():
    for var in ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"):
        if var in os.environ:
            return int(os.environ[var])
    return 0


def main():
    args = ["-x", "-p", "no:cacheprovider", "--color=no", "--rootdir", HERE, HERE] + sys.argv[1:]
    rank = world_rank()
    if rank == 0:
        return pytest.main(args)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with tempfile.TemporaryFile(mode="w+") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        try:
            code = pytest.main(args + ["-q"])
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
        if code != 0:
            log.seek(0)
            print(f"======== rank {rank}: pytest exited with {int(code)}; its output: ========")
            print(log.read(), flush=True)
    return code


if __name__ == "__main__":
    sys.exit(int(main()))
