"""Values of the C ABI's enums and macros, as declared in include/mgs/mgs.h.

The header is the ABI: these numbers are part of it and never change meaning.
They are written here once so that the bindings need no C compiler. Status
codes are *not* copied: `_lib` reads their names from the library itself
(`mgs_status_string`). Dtype sizes are cross-checked against
`mgs_dtype_size` when the library is loaded, and tests/python/test_abi.py
checks every value below against the header.
"""

# enum mgs_dtype
MGS_FLOAT32 = 0
MGS_FLOAT64 = 1
MGS_FLOAT16 = 2
MGS_BFLOAT16 = 3
MGS_INT32 = 4
MGS_INT64 = 5
MGS_UINT8 = 6

# element size of each dtype, checked against mgs_dtype_size() at load
DTYPE_SIZES = {
    MGS_FLOAT32: 4,
    MGS_FLOAT64: 8,
    MGS_FLOAT16: 2,
    MGS_BFLOAT16: 2,
    MGS_INT32: 4,
    MGS_INT64: 8,
    MGS_UINT8: 1,
}

# enum mgs_reduce_op
MGS_REDUCE_SUM = 0
MGS_REDUCE_AVERAGE = 1

# macros
MGS_DEVICE_CPU = -1
MGS_MAX_DIMS = 8
MGS_FLAG_NONE = 0
MGS_FLAG_SPARSE_OK = 1
MGS_GLOBAL_PROCESS_SET = 0
