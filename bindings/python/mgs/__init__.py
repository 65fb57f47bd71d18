"""mgs: merged-gradient sparsification runtime for distributed deep learning.

The framework adapters live in subpackages (`mgs.torch`); this package only
loads the C library (libmgs) and exposes what does not depend on a framework.
"""

__version__ = "0.1.0"

# The exceptions the bindings raise (the library itself loads on first use).
from ._lib import MgsError, MgsRuntimeError, MgsUnsupportedError, MgsValueError  # noqa: E402,F401


def library_path():
    """The path of the libmgs that the bindings loaded (loading it if needed)."""
    from ._lib import lib
    return lib().path


def library_version():
    """The version string reported by the loaded libmgs."""
    from ._lib import lib
    return lib().mgs_version().decode()


def runtime_stats():
    """This rank's runtime counters since init (mgs_get_stats) as a dict; None if libmgs lacks them."""
    from ._lib import lib
    return lib().stats()


def plan_buckets():
    """The merge plan's buckets in backward order (mgs_get_plan_buckets), each a dict: tensors,
    elements, predicted_ready_us and predicted_end_us (-1: not known), measured_ready_us and
    measured_end_us (the last compared step, mean over ranks), their sums measured_ready_sum_us and
    measured_end_sum_us, and checks. Ready: when negotiation declared the bucket's last gradient
    enqueued on every rank. Times are microseconds from the first gradient of the rank that started
    the step last.
    [] while the job profiles; None if libmgs lacks the call."""
    from ._lib import lib
    return lib().plan_buckets()
