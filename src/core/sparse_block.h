// The typed sparse block: what a rank sends per sparse bucket, as views over
// the byte layout of common/block_layout.h (the one definition, shared with
// the CUDA bucket kernels). Host code goes through these views.
//
//   allgather block  [header u64 | values f32[cap] | indices u32[cap] | seal u64]
//   agreed index block  [header u64 | indices u32[cap] | seal u64]
//
// cap depends only on the bucket's size and density, so every rank sends a
// block of the same size whatever it selected (no count round trip). The
// header is a count <= cap, or a failure code (> cap: counts are < 2^32):
// UINT64_MAX for a local failure without details, UINT64_MAX - 1 - m for
// non-finite values in member m, or stagingCode(m, cause) for a member
// this rank could not serve at all (a CUDA tensor on the wrong device, an
// output it cannot write: StagingCause), so that every rank names the tensor
// and the cause, not only the rank that found it. The seal (header ^ a per-layout constant) at
// the far end tells a whole block from a short or torn message: a receiver
// clears every seal slot before the exchange, so a slot that is not rewritten
// cannot match (a cleared 0 would need header == the constant, itself an
// invalid header). Values and indices are naturally aligned when the buffer
// is (every buffer here comes from std::vector<char>, malloc-aligned).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "common/block_layout.h"  // the offsets, seals and codes, shared with the CUDA kernels

namespace mgs::block {

// Why a rank could not serve a member at all (the low byte of a staging
// code; 0 is not a cause). Checked before anything of the bucket runs, so
// the rank still takes part in the exchange with this code in its header.
enum class StagingCause : uint8_t {
  kNone = 0,
  kNotCuda = 1,      // the input is not a CUDA tensor, where every rank's is
  kWrongDevice = 2,  // the input is on another CUDA device than the exchange's
  kDtype = 3,        // an input dtype the device stage does not take
  kOutput = 4,       // the output is not a CUDA tensor of the input's size and a float dtype on that device
  kNoData = 5,       // a null data pointer
};
static_assert(static_cast<uint8_t>(StagingCause::kNoData) == kMaxStagingCause, "block_layout.h's last cause");
// What the cause means, for messages ("the input is on another CUDA device ...").
inline const char* stagingCauseText(StagingCause c) {
  switch (c) {
    case StagingCause::kNotCuda:
      return "the input is not a CUDA tensor";
    case StagingCause::kWrongDevice:
      return "the input is on another CUDA device than the exchange's";
    case StagingCause::kDtype:
      return "the input's dtype is not float32, float16 or bfloat16";
    case StagingCause::kOutput:
      return "the output is not a float CUDA tensor of the input's size on the exchange's device";
    case StagingCause::kNoData:
      return "a null data pointer";
    case StagingCause::kNone:
      break;
  }
  return "no cause";
}

// Staging codes (block_layout.h): disjoint from counts (< 2^32) and from the
// non-finite codes (>= 2^64 - 2^32 - 1).
constexpr uint64_t stagingCode(uint32_t member, StagingCause cause) {
  return stagingCodeRaw(member, static_cast<uint8_t>(cause));
}

// What a header says, given the block's cap and the bucket's member count.
struct Header {
  enum Kind { kCount, kFailure, kInvalid } kind;
  uint64_t count;  // kCount: the entries in the block
  int bad_member;  // kFailure: the member with non-finite values (or the staging cause's member), or -1
  StagingCause cause = StagingCause::kNone;  // kFailure: kNone for non-finite values / no details
};
inline Header decodeHeader(uint64_t h, size_t cap, size_t members) {
  if (h <= cap) return {Header::kCount, h, -1};
  if (h == UINT64_MAX) return {Header::kFailure, 0, -1};
  const uint64_t m = UINT64_MAX - 1 - h;
  if (m < members) return {Header::kFailure, 0, static_cast<int>(m)};
  if (isStagingCode(h, members))
    return {Header::kFailure, 0, static_cast<int>((h >> 8) & 0xffffffffull), static_cast<StagingCause>(h & 0xff)};
  return {Header::kInvalid, 0, -1};
}

// A view over the bytes of one block; Byte is char (to fill) or const char
// (to read). It owns nothing and checks nothing: the size was fixed by cap.
template <class Byte, bool kIndexOnly>
class View {
 public:
  View(Byte* base, size_t cap) : base_(base), cap_(cap) {}
  static constexpr size_t bytesFor(size_t cap) { return kIndexOnly ? indexBytes(cap) : allgatherBytes(cap); }
  static constexpr uint64_t kSeal = kIndexOnly ? kIndexSeal : kAllgatherSeal;

  size_t cap() const { return cap_; }
  size_t bytes() const { return bytesFor(cap_); }
  Byte* data() const { return base_; }

  uint64_t header() const { return load(0); }
  uint64_t sealWord() const { return load(sealAt()); }
  // The seal matches the header: the whole block arrived.
  bool sealed() const { return sealWord() == (header() ^ kSeal); }

  // Only for the allgather layout.
  template <bool I = kIndexOnly, class = std::enable_if_t<!I>>
  auto values() const {
    return reinterpret_cast<std::conditional_t<std::is_const_v<Byte>, const float*, float*>>(base_ + valuesOffset());
  }
  auto indices() const {
    return reinterpret_cast<std::conditional_t<std::is_const_v<Byte>, const uint32_t*, uint32_t*>>(
        base_ + (kIndexOnly ? indexIndicesOffset() : indicesOffset(cap_)));
  }

  // Writers (Byte = char).
  // The header and its seal: a block is complete once this is written.
  void finish(uint64_t header) const {
    store(0, header);
    store(sealAt(), header ^ kSeal);
  }
  // Receivers clear the seal of a (pooled) buffer before the exchange.
  void clearSeal() const { store(sealAt(), 0); }

 private:
  size_t sealAt() const { return kIndexOnly ? indexSealOffset(cap_) : sealOffset(cap_); }
  uint64_t load(size_t at) const {
    uint64_t v;
    std::memcpy(&v, base_ + at, 8);
    return v;
  }
  void store(size_t at, uint64_t v) const { std::memcpy(base_ + at, &v, 8); }
  Byte* base_;
  size_t cap_;
};

using AllgatherBlock = View<char, false>;
using ConstAllgatherBlock = View<const char, false>;
using IndexBlock = View<char, true>;
using ConstIndexBlock = View<const char, true>;

}  // namespace mgs::block
