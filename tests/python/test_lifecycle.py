"""Calls before init() and after shutdown() raise ValueError naming init(); a one-rank world works.

This runs in a fresh interpreter outside the mpirun job (MPI can be initialised
only once per process), on rank 0 only: it makes no collective calls here.
"""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import mgs.torch as hvd

SCRIPT = textwrap.dedent("""
    import pytest, torch
    import mgs.torch as hvd

    assert not hvd.is_initialized()
    for call in (hvd.rank, hvd.size, hvd.local_rank, hvd.local_size, hvd.barrier,
                 lambda: hvd.allreduce(torch.ones(2)), lambda: hvd.allgather(torch.ones(2)),
                 lambda: hvd.broadcast(torch.ones(2), 0)):
        with pytest.raises(ValueError, match=r"init\\(\\)"):
            call()

    hvd.init()
    hvd.init()  # a second call while running is a no-op
    assert hvd.is_initialized() and hvd.size() == 1 and hvd.rank() == 0
    assert hvd.allreduce(torch.arange(4.)).tolist() == [0., 1., 2., 3.]
    assert hvd.allgather(torch.ones(2, 3)).shape == (2, 3)
    hvd.shutdown()
    hvd.shutdown()  # idempotent
    assert not hvd.is_initialized()
    with pytest.raises(ValueError, match=r"init\\(\\)"):
        hvd.rank()
    with pytest.raises(ValueError, match=r"init\\(\\)"):
        hvd.allreduce(torch.ones(2))
    print("lifecycle ok")
""")


@pytest.mark.skipif(hvd.rank() != 0, reason="runs once per job, in a separate process")
def test_before_init_after_shutdown_and_single_rank():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_", "PMI_"))}
    env["OMPI_ALLOW_RUN_AS_ROOT"] = env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
    env["PYTHONPATH"] = os.pathsep.join([str(Path(hvd.__file__).parents[2])] +
                                        [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and "lifecycle ok" in proc.stdout, proc.stdout + proc.stderr
