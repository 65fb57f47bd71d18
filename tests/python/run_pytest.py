"""Run a folder's tests on one rank of an mpirun job (this folder by default).

Rank 0 reports normally. Other ranks write their report (and the runtime's
stderr) to a temporary file and print it only if they failed, so the ranks'
outputs do not interleave.
Usage: mpirun -np N python3 run_pytest.py [TEST_DIR] [pytest args]
(tests/tensorflow runs it with its own folder and the .venv-tf interpreter)
"""

import os
import sys
import tempfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


def world_rank():
    for var in ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"):
        if var in os.environ:
            return int(os.environ[var])
    return 0


def main():
    rest = sys.argv[1:]
    folder = HERE
    if rest and os.path.isdir(rest[0]):
        folder, rest = os.path.abspath(rest[0]), rest[1:]
    args = ["-x", "-p", "no:cacheprovider", "--color=no", "--rootdir", folder, folder] + rest
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
