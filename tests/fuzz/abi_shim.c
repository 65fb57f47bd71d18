/* C callers (ctypes, other languages) pass the reduce op as a plain int; in
 * C an enum object may hold any value of its compatible integer type, so this
 * shim hands mgs any 32-bit op the way such a caller would, without the
 * harness itself loading an invalid enum value in C++. */
#include <string.h>

#include "mgs/mgs.h"

mgs_status_t fuzz_allreduce_raw_op(const char* name, const mgs_tensor_t* input, const mgs_tensor_t* output,
                                   int op, double prescale, double postscale, uint32_t flags,
                                   mgs_handle_t* handle) {
  mgs_reduce_op_t e;
  memcpy(&e, &op, sizeof e);
  return mgs_allreduce_async(name, input, output, e, prescale, postscale, flags, handle);
}
