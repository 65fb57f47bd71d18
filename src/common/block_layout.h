// The byte layout of a sparse block, for host and device code alike: the
// host exchange (core/sparse_block.h, its typed views) and the CUDA bucket
// kernels (cuda/bucket_kernels.cu) both compute every offset, seal and
// failure code from these functions, so the two cannot drift apart.
//
//   allgather block     [header u64 | values f32[cap] | indices u32[cap] | seal u64]
//   agreed index block  [header u64 | indices u32[cap] | seal u64]
//
// The header is a count <= cap or a failure code (> cap; counts are < 2^32):
//   UINT64_MAX                 a local failure without details
//   UINT64_MAX - 1 - m         non-finite values in member m
//   stagingCode(m, cause)      member m could not be served at all (bit 63,
//                              m in bits 8..39, the cause in bits 0..7,
//                              bits 40..62 clear)
// The seal (header ^ the layout's constant) ends the block.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/host_device.h"

namespace mgs::block {

constexpr uint64_t kAllgatherSeal = 0x6d67732d626c6b21ull;  // "mgs-blk!"
constexpr uint64_t kIndexSeal = 0x6d67732d69647821ull;      // "mgs-idx!"

// Allgather block: sizes and offsets for room for `cap` entries.
MGS_HOST_DEVICE constexpr size_t allgatherBytes(size_t cap) { return 16 + 8 * cap; }
MGS_HOST_DEVICE constexpr size_t valuesOffset() { return 8; }
MGS_HOST_DEVICE constexpr size_t indicesOffset(size_t cap) { return 8 + 4 * cap; }
MGS_HOST_DEVICE constexpr size_t sealOffset(size_t cap) { return 8 + 8 * cap; }
// Agreed index block.
MGS_HOST_DEVICE constexpr size_t indexBytes(size_t cap) { return 16 + 4 * cap; }
MGS_HOST_DEVICE constexpr size_t indexIndicesOffset() { return 8; }
MGS_HOST_DEVICE constexpr size_t indexSealOffset(size_t cap) { return 8 + 4 * cap; }

// The header of a rank whose local part failed (bad_member < 0: no details).
MGS_HOST_DEVICE constexpr uint64_t failureCode(int bad_member) {
  return bad_member < 0 ? UINT64_MAX : UINT64_MAX - 1 - static_cast<uint64_t>(bad_member);
}

// Staging codes (the causes: core/sparse_block.h StagingCause, 1..kMaxStagingCause).
constexpr uint64_t kStagingBit = uint64_t{1} << 63;
constexpr uint8_t kMaxStagingCause = 5;
MGS_HOST_DEVICE constexpr uint64_t stagingCodeRaw(uint32_t member, uint8_t cause) {
  return kStagingBit | (uint64_t{member} << 8) | static_cast<uint64_t>(cause);
}
// Whether header `h` is a well-formed staging code of a bucket of `members`.
MGS_HOST_DEVICE constexpr bool isStagingCode(uint64_t h, size_t members) {
  return (h & kStagingBit) != 0 && ((h >> 40) & 0x7fffffull) == 0 && (h & 0xff) >= 1 &&
         (h & 0xff) <= kMaxStagingCause && ((h >> 8) & 0xffffffffull) < members;
}

// The agreed exchange's verdict slots on the device (one per rank, summed
// as floats by the values' allreduce; every other rank adds 0, so the slot
// arrives exact): 0 when the rank contributed, else 1 + cause + 6 * (m + 1)
// for its failure in member m (-1: no details; cause 0: non-finite values).
// agreedSlotCode turns a slot back into the header code the host exchanges
// name failures from (UINT64_MAX for a slot no rank could have written).
constexpr uint32_t kSlotCauses = kMaxStagingCause + 1;
MGS_HOST_DEVICE constexpr uint32_t agreedSlot(int bad_member, uint8_t cause) {
  return 1u + cause + kSlotCauses * static_cast<uint32_t>(bad_member + 1);
}
MGS_HOST_DEVICE constexpr uint64_t agreedSlotCode(uint32_t slot, size_t members) {
  if (slot == 0) return UINT64_MAX;
  const uint32_t cause = (slot - 1) % kSlotCauses, m1 = (slot - 1) / kSlotCauses;
  if (m1 == 0 || m1 > members) return UINT64_MAX;  // no member named (or none of this bucket's)
  if (cause == 0) return failureCode(static_cast<int>(m1 - 1));
  return stagingCodeRaw(m1 - 1, static_cast<uint8_t>(cause));
}

}  // namespace mgs::block
