// The only ways runtime code on the device path may block the host on the
// GPU: each one counts itself in hostSyncs() (cuda/device_bucket.h), so tests
// can assert that the bucket path makes none in steady state. Plain header
// (streams, events as void*). Ran on an H100.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/status.h"

namespace mgs::cuda {

uint64_t hostSyncs();
Status syncStream(void* stream);  // cudaStreamSynchronize
Status syncEvent(void* event);    // cudaEventSynchronize
// Blocking cudaMemcpy (pageable memory): a host synchronisation too.
Status copyToHostBlocking(void* dst, const void* d_src, size_t bytes);
Status copyToDeviceBlocking(void* d_dst, const void* src, size_t bytes);

}  // namespace mgs::cuda
