"""Every test in this folder runs on all ranks of an mpirun job (see run_pytest.py).

Tests must make the same collective calls in the same order on every rank, and
skip on all ranks or none (except tests that make no collective calls).
"""

import pytest
import torch

import mgs.torch as hvd


def pytest_configure(config):
    torch.set_num_threads(1)
    hvd.init()


@pytest.fixture
def rank():
    return hvd.rank()


@pytest.fixture
def size():
    return hvd.size()
