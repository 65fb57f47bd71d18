"""Every test in this folder runs on all ranks of an mpirun job (see run_pytest.py).

Tests must make the same collective calls in the same order on every rank, and
skip on all ranks or none (except tests that make no collective calls).
"""

import os

import pytest
import torch

import mgs.torch as hvd


def pytest_configure(config):
    torch.set_num_threads(1)
    # The tests check sparse results at a fixed density from the first step: density warm-up (on by
    # default below 10%, tested in mpi.exchange.warmup_*) is off unless a test sets it. Here rather than
    # in the harness, so that every harness (ctest, scripts/sanitize.sh) runs the suite the same way.
    os.environ.setdefault("MGS_WARMUP_STEPS", "0")
    hvd.init()


@pytest.fixture
def rank():
    return hvd.rank()


@pytest.fixture
def size():
    return hvd.size()
