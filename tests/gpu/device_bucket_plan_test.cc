// The CPU side of the device-resident bucket (cuda/device_bucket_host.cc):
// block format constants, member descriptors and the decoding of the
// scatter's verdict words. Runs in every build, no GPU needed.
#include <cstdint>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "device_bucket.h"

namespace mgs::cuda {
namespace {

BucketMember member(const std::string& name, mgs_dtype_t dtype, size_t count, double pre = 1.0, double post = 1.0) {
  static char dummy[16];
  BucketMember m;
  m.name = name;
  m.d_grad = dummy;
  m.d_out = dummy;
  m.dtype = dtype;
  m.count = count;
  m.prescale = pre;
  m.outFactor = post;
  return m;
}

// Words as the device would write them: kind, malformed rank, headers.
std::vector<uint64_t> words(VerdictKind kind, uint64_t malformed, std::vector<uint64_t> headers) {
  std::vector<uint64_t> w = {static_cast<uint64_t>(kind), malformed};
  w.insert(w.end(), headers.begin(), headers.end());
  return w;
}

}  // namespace

TEST_CASE("device bucket: block layout is the CPU exchange's", "[gpu_cpu][bucket]") {
  // core/sparse_block.h: [header | values[cap] | indices[cap] | seal], 16 + 8 cap bytes.
  CHECK(mgs::block::allgatherBytes(0) == 16);
  CHECK(mgs::block::allgatherBytes(1000) == 8016);
  CHECK(mgs::block::valuesOffset() == 8);
  CHECK(mgs::block::indicesOffset(1000) == 4008);
  CHECK(mgs::block::sealOffset(1000) == 8008);
  CHECK(mgs::block::sealOffset(1000) + 8 == mgs::block::allgatherBytes(1000));
  CHECK(mgs::block::failureCode(-1) == UINT64_MAX);
  CHECK(mgs::block::failureCode(0) == UINT64_MAX - 1);
  CHECK(mgs::block::failureCode(5) == UINT64_MAX - 6);
  CHECK(mgs::block::kAllgatherSeal == 0x6d67732d626c6b21ull);
}

TEST_CASE("device bucket: fuse descriptors lay members back to back", "[gpu_cpu][bucket]") {
  std::vector<BucketMember> ms = {member("a", MGS_FLOAT32, 10, 0.5), member("b", MGS_FLOAT16, 0),
                                  member("c", MGS_BFLOAT16, 7, 2.0)};
  std::vector<FuseDesc> d;
  size_t n = 0;
  REQUIRE(buildFuseDescs(ms, &d, &n).ok());
  REQUIRE(d.size() == 3);
  CHECK(n == 17);
  CHECK(d[0].offset == 0);
  CHECK(d[0].count == 10);
  CHECK(d[0].prescale == 0.5f);
  CHECK(d[0].dtype == MGS_FLOAT32);
  CHECK(d[1].offset == 10);
  CHECK(d[1].count == 0);
  CHECK(d[1].dtype == MGS_FLOAT16);
  CHECK(d[2].offset == 10);
  CHECK(d[2].prescale == 2.0f);
  CHECK(d[2].dtype == MGS_BFLOAT16);
  std::vector<OutDesc> o;
  size_t n2 = 0;
  ms[2].outFactor = 0.25;
  REQUIRE(buildOutDescs(ms, &o, &n2).ok());
  CHECK(n2 == 17);
  CHECK(o[2].offset == 10);
  CHECK(o[2].factor == 0.25f);
  CHECK(o[0].dst == ms[0].d_out);
}

TEST_CASE("device bucket: descriptors refuse bad members by name", "[gpu_cpu][bucket]") {
  std::vector<FuseDesc> d;
  size_t n = 0;
  std::vector<BucketMember> ms = {member("ok", MGS_FLOAT32, 4), member("ints", MGS_INT32, 4)};
  Status st = buildFuseDescs(ms, &d, &n);
  REQUIRE_FALSE(st.ok());
  CHECK(st.code() == Code::kInvalidArgument);
  CHECK(st.message().find("'ints'") != std::string::npos);
  CHECK(st.message().find("float32, float16 or bfloat16") != std::string::npos);

  ms = {member("g", MGS_FLOAT64, 4)};
  CHECK(!buildFuseDescs(ms, &d, &n).ok());

  ms = {member("null", MGS_FLOAT32, 4)};
  ms[0].d_grad = nullptr;
  st = buildFuseDescs(ms, &d, &n);
  CHECK(st.message().find("'null'") != std::string::npos);
  CHECK(st.message().find("NULL") != std::string::npos);
  ms[0].count = 0;  // an empty member may have no data
  CHECK(buildFuseDescs(ms, &d, &n).ok());
  ms[0].d_out = nullptr;
  ms[0].count = 3;
  std::vector<OutDesc> o;
  st = buildOutDescs(ms, &o, &n);
  CHECK(st.message().find("the output is NULL") != std::string::npos);

  // Indices are uint32: a bucket of 2^32 elements or more is refused.
  ms = {member("big", MGS_FLOAT32, size_t{1} << 31), member("bigger", MGS_FLOAT32, size_t{1} << 31)};
  st = buildFuseDescs(ms, &d, &n);
  REQUIRE_FALSE(st.ok());
  CHECK(st.message().find("'bigger'") != std::string::npos);
  CHECK(st.message().find("2^32") != std::string::npos);
}

TEST_CASE("device bucket: verdict decoding", "[gpu_cpu][bucket]") {
  const size_t cap = 100, M = 3;
  BucketVerdict v;
  // All counts: ok, committable.
  auto w = words(VerdictKind::kOk, UINT64_MAX, {0, 100, 7});
  REQUIRE(decodeVerdict(w.data(), 3, cap, M, true, &v).ok());
  CHECK(v.kind == VerdictKind::kOk);
  CHECK(v.committable());
  CHECK(v.failure == std::vector<int>{-1, -1, -1});

  // Rank 1 had NaN in member 2: propagate -> NaN written, not committable, OK status.
  w = words(VerdictKind::kNaNWritten, UINT64_MAX, {5, mgs::block::failureCode(2), 9});
  REQUIRE(decodeVerdict(w.data(), 3, cap, M, true, &v).ok());
  CHECK(v.kind == VerdictKind::kNaNWritten);
  CHECK(!v.committable());
  CHECK(v.failure == std::vector<int>{-1, 2, -1});
  std::vector<BucketMember> ms = {member("w0", MGS_FLOAT32, 1), member("w1", MGS_FLOAT32, 1),
                                  member("w2", MGS_FLOAT32, 1)};
  CHECK(verdictStatus(v, ms, "bucket 'w0'..").ok());

  // The same headers under MGS_NONFINITE=error: kFailed, kNumeric naming rank and tensor.
  w[0] = static_cast<uint64_t>(VerdictKind::kFailed);
  REQUIRE(decodeVerdict(w.data(), 3, cap, M, false, &v).ok());
  Status st = verdictStatus(v, ms, "bucket 'w0'..");
  CHECK(st.code() == Code::kNumeric);
  CHECK(st.message().find("rank 1 has NaN or Inf in tensor 'w2'") != std::string::npos);
  CHECK(st.message().find("residuals unchanged") != std::string::npos);

  // A generic failure is never turned into NaN outputs, even under propagate.
  w = words(VerdictKind::kFailed, UINT64_MAX, {UINT64_MAX, mgs::block::failureCode(0), 1});
  REQUIRE(decodeVerdict(w.data(), 3, cap, M, true, &v).ok());
  st = verdictStatus(v, ms, "b");
  CHECK(st.code() == Code::kInternal);
  CHECK(st.message().find("rank 0 failed before the exchange") != std::string::npos);
  CHECK(st.message().find("rank 1 has NaN or Inf in tensor 'w0'") != std::string::npos);

  // Malformed block: kCommunication naming the rank.
  w = words(VerdictKind::kMalformed, 2, {1, 2, 12345});
  REQUIRE(decodeVerdict(w.data(), 3, cap, M, true, &v).ok());
  CHECK(v.malformedRank == 2);
  st = verdictStatus(v, ms, "b");
  CHECK(st.code() == Code::kCommunication);
  CHECK(st.message().find("rank 2 sent a malformed block") != std::string::npos);
}

TEST_CASE("device bucket: staging codes are failures, never NaN outputs", "[gpu_cpu][bucket]") {
  const size_t cap = 100, M = 3;
  // Rank 1 could not serve member 2 (cause 2: another device): bit 63 | m << 8 | cause.
  const uint64_t staging = mgs::block::kStagingBit | (uint64_t{2} << 8) | 2;
  CHECK(mgs::block::isStagingCode(staging, M));
  CHECK(!mgs::block::isStagingCode(staging, 2));                                       // no member 2
  CHECK(!mgs::block::isStagingCode(mgs::block::kStagingBit | (uint64_t{2} << 8), M));       // cause 0
  CHECK(!mgs::block::isStagingCode(mgs::block::kStagingBit | (mgs::block::kMaxStagingCause + 1), M));   // unknown cause
  CHECK(!mgs::block::isStagingCode(mgs::block::kStagingBit | (uint64_t{1} << 40) | 1, M));  // bits 40..62
  CHECK(!mgs::block::isStagingCode(mgs::block::failureCode(0), M));
  CHECK(!mgs::block::isStagingCode(UINT64_MAX, M));
  BucketVerdict v;
  // Under propagate too: a staging code is not a non-finite value.
  auto w = words(VerdictKind::kFailed, UINT64_MAX, {4, staging, mgs::block::failureCode(1)});
  REQUIRE(decodeVerdict(w.data(), 3, cap, M, true, &v).ok());
  CHECK(v.kind == VerdictKind::kFailed);
  CHECK(v.failure == std::vector<int>{-1, -2, 1});
  // A kind the headers do not imply is an internal error (the device would have said kFailed).
  w[0] = static_cast<uint64_t>(VerdictKind::kNaNWritten);
  CHECK(decodeVerdict(w.data(), 3, cap, M, true, &v).code() == Code::kInternal);
}

TEST_CASE("device bucket: verdict words that contradict the headers are an internal error", "[gpu_cpu][bucket]") {
  BucketVerdict v;
  // Kind ok, but rank 0 sent a failure code.
  auto w = words(VerdictKind::kOk, UINT64_MAX, {mgs::block::failureCode(0), 3});
  Status st = decodeVerdict(w.data(), 2, 10, 1, true, &v);
  CHECK(st.code() == Code::kInternal);
  // A header above cap that is no failure code, but no malformed rank.
  w = words(VerdictKind::kOk, UINT64_MAX, {11, 3});
  CHECK(decodeVerdict(w.data(), 2, 10, 1, true, &v).code() == Code::kInternal);
  // A failure code for member 1 of a 1-member bucket is no failure code.
  w = words(VerdictKind::kMalformed, 0, {mgs::block::failureCode(1), 3});
  CHECK(decodeVerdict(w.data(), 2, 10, 1, true, &v).ok());
  // Unknown kind; malformed rank out of range.
  w = words(static_cast<VerdictKind>(9), UINT64_MAX, {1, 3});
  CHECK(decodeVerdict(w.data(), 2, 10, 1, true, &v).code() == Code::kInternal);
  w = words(VerdictKind::kMalformed, 2, {1, 3});
  CHECK(decodeVerdict(w.data(), 2, 10, 1, true, &v).code() == Code::kInternal);
  CHECK(decodeVerdict(nullptr, 2, 10, 1, true, &v).code() == Code::kInvalidArgument);
}

}  // namespace mgs::cuda
