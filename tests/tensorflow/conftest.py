"""Every test in this folder runs on all ranks of an mpirun job (see tests/python/run_pytest.py).

Tests must make the same collective calls in the same order on every rank, and
skip on all ranks or none. MGS_COMPRESSOR is read once, at init: tests that
need the exact (dense) gradient path skip under a compressor, and the sparse
reference test skips without one; ctest runs the folder once per setting.
"""

import os

import pytest
import tensorflow as tf

import mgs.tensorflow as hvd

COMPRESSOR = os.environ.get("MGS_COMPRESSOR", "none") or "none"


def pytest_configure(config):
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(2)
    os.environ.setdefault("MGS_WARMUP_STEPS", "0")  # fixed density from step 0, as tests/python/conftest.py
    hvd.init()


@pytest.fixture
def rank():
    return hvd.rank()


@pytest.fixture
def size():
    return hvd.size()
