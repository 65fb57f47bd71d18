"""The bindings' copy of the ABI constants matches include/mgs/mgs.h and the library."""

import re
from pathlib import Path

import torch

import mgs
from mgs import _abi
from mgs._lib import lib

HEADER = Path(__file__).resolve().parents[2] / "include" / "mgs" / "mgs.h"


def header_constants():
    text = re.sub(r"/\*.*?\*/", "", HEADER.read_text(), flags=re.S)
    values = {}
    for body in re.findall(r"typedef enum \w+ \{(.*?)\}", text, flags=re.S):
        for name, value in re.findall(r"(MGS_\w+)\s*=\s*(-?\d+)", body):
            values[name] = int(value)
    for name, value in re.findall(r"#define (MGS_\w+)\s+\(?(-?\d+)u?\)?", text):
        values[name] = int(value)
    return values


def test_enum_and_macro_values_match_the_header():
    header = header_constants()
    mirrored = {k: v for k, v in vars(_abi).items() if k.startswith("MGS_")}
    assert mirrored, "no constants in mgs._abi"
    for name, value in mirrored.items():
        assert header.get(name) == value, f"{name}: bindings {value}, header {header.get(name)}"
    # every dtype and reduce op of the header is mirrored
    for name in header:
        if name.startswith(("MGS_FLOAT", "MGS_BFLOAT", "MGS_INT", "MGS_UINT", "MGS_REDUCE_")):
            assert name in mirrored, f"{name} is in the header but not in mgs._abi"


def test_status_names_come_from_the_library():
    header = header_constants()
    L = lib()
    statuses = {k: v for k, v in header.items() if k == "MGS_SUCCESS" or k.startswith("MGS_ERR_")}
    assert L.status_codes == statuses


def test_dtype_sizes_match_the_library():
    L = lib()
    for dtype, size in _abi.DTYPE_SIZES.items():
        assert L.mgs_dtype_size(dtype) == size


def test_torch_dtype_sizes_agree():
    from mgs.torch import _tensor
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64,
                  torch.uint8):
        assert _abi.DTYPE_SIZES[_tensor.mgs_dtype(dtype)] == torch.empty(0, dtype=dtype).element_size()


def test_library_identity():
    assert mgs.library_version() == mgs.__version__
    assert mgs.library_path().endswith("libmgs.so") or "libmgs.so" in mgs.library_path()
