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


def header_struct_fields(struct):
    text = re.sub(r"/\*.*?\*/", "", HEADER.read_text(), flags=re.S)
    body = re.search(r"typedef struct %s \{(.*?)\}" % struct, text, flags=re.S)
    return [] if body is None else re.findall(r"(\w+)\s+(\w+);", body.group(1))


def test_stats_struct_matches_the_header():
    import ctypes
    from mgs._lib import MgsStats
    c_names = {"uint64_t": ctypes.c_uint64, "double": ctypes.c_double}
    header = header_struct_fields("mgs_stats")
    ours = MgsStats._fields_
    # Fields are only appended: the common prefix must agree in name and type; a library
    # with fewer fields leaves ours unwritten (Library.stats drops them).
    for (ctype, name), (our_name, our_type) in zip(header, ours):
        assert (name, c_names[ctype]) == (our_name, our_type), f"mgs_stats_t field {name}"
    if header:
        assert len(ours) >= len(header), "mgs_stats_t has fields the bindings do not read"


def test_plan_bucket_struct_matches_the_header():
    import ctypes
    from mgs._lib import MgsPlanBucket
    c_names = {"uint64_t": ctypes.c_uint64, "int64_t": ctypes.c_int64}
    header = header_struct_fields("mgs_plan_bucket")
    assert header, "no mgs_plan_bucket_t in the header"
    assert [(n, c_names[t]) for t, n in header] == list(MgsPlanBucket._fields_)


def test_runtime_stats_are_counted():
    stats = mgs.runtime_stats()
    if stats is None:
        return  # a library without mgs_get_stats
    import mgs.torch as hvd
    before = stats["ops_completed"]
    hvd.allreduce(torch.ones(3), name="stats.probe")
    assert mgs.runtime_stats()["ops_completed"] > before


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
