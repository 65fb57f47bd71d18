// The parts of the device bucket that need no device: member descriptors and
// the decoding of the scatter's verdict words. Built in every build (with
// select_plan.cc) and tested on the CPU (tests/gpu/device_bucket_plan_test.cc).
#include <limits>

#include "common/check.h"
#include "device_bucket.h"

namespace mgs::cuda {
namespace {

bool bucketDtype(mgs_dtype_t d) { return d == MGS_FLOAT32 || d == MGS_FLOAT16 || d == MGS_BFLOAT16; }

const char* dtypeText(mgs_dtype_t d) {
  switch (d) {
    case MGS_FLOAT32:
      return "float32";
    case MGS_FLOAT16:
      return "float16";
    case MGS_BFLOAT16:
      return "bfloat16";
    case MGS_FLOAT64:
      return "float64";
    default:
      return "an integer dtype";
  }
}

// Shared checks of both descriptor kinds; `what` is "gradient" or "output".
Status checkMember(const BucketMember& m, size_t i, const void* p, const char* what, size_t* n) {
  MGS_ENSURE(bucketDtype(m.dtype), kInvalidArgument,
             "device bucket member " << i << " ('" << m.name << "'): dtype " << dtypeText(m.dtype)
                                     << " (device buckets take float32, float16 or bfloat16)");
  MGS_ENSURE(
      p != nullptr || m.count == 0, kInvalidArgument,
      "device bucket member " << i << " ('" << m.name << "'): " << what << " is NULL with " << m.count << " elements");
  MGS_ENSURE(m.count <= static_cast<size_t>(UINT32_MAX) - *n, kInvalidArgument,
             "device bucket member " << i << " ('" << m.name << "'): the bucket would exceed 2^32 - 1 elements "
                                     << "(indices are uint32)");
  *n += m.count;
  return Status::OK();
}

}  // namespace

Status buildFuseDescs(const std::vector<BucketMember>& members, std::vector<FuseDesc>* out, size_t* n) {
  out->clear();
  *n = 0;
  for (size_t i = 0; i < members.size(); ++i) {
    const BucketMember& m = members[i];
    const size_t off = *n;
    MGS_RETURN_IF_ERROR(checkMember(m, i, m.d_grad, "the gradient", n));
    out->push_back(FuseDesc{m.d_grad, off, m.count, static_cast<float>(m.prescale), static_cast<uint32_t>(m.dtype)});
  }
  return Status::OK();
}

Status buildOutDescs(const std::vector<BucketMember>& members, std::vector<OutDesc>* out, size_t* n) {
  out->clear();
  *n = 0;
  for (size_t i = 0; i < members.size(); ++i) {
    const BucketMember& m = members[i];
    const size_t off = *n;
    MGS_RETURN_IF_ERROR(checkMember(m, i, m.d_out, "the output", n));
    out->push_back(OutDesc{m.d_out, off, m.count, static_cast<float>(m.outFactor), static_cast<uint32_t>(m.dtype)});
  }
  return Status::OK();
}

Status decodeVerdict(const uint64_t* words, int P, size_t cap, size_t members, bool propagate, BucketVerdict* out) {
  MGS_ENSURE(words != nullptr && P >= 1, kInvalidArgument, "decodeVerdict: no words or P = " << P);
  BucketVerdict v;
  v.failure.assign(static_cast<size_t>(P), -1);
  const uint64_t kind = words[0];
  MGS_ENSURE(kind <= static_cast<uint64_t>(VerdictKind::kMalformed), kInternal,
             "device scatter verdict: unknown kind " << kind);
  v.kind = static_cast<VerdictKind>(kind);
  if (words[1] != UINT64_MAX) {
    MGS_ENSURE(words[1] < static_cast<uint64_t>(P), kInternal,
               "device scatter verdict: malformed rank " << words[1] << " of " << P);
    v.malformedRank = static_cast<int>(words[1]);
  }
  bool failed = false, other = false;
  for (int r = 0; r < P; ++r) {
    const uint64_t h = words[2 + r];
    if (h <= cap) continue;
    if (h == UINT64_MAX) {
      v.failure[r] = -2;
      other = true;
    } else if (UINT64_MAX - 1 - h < members) {
      v.failure[r] = static_cast<int>(UINT64_MAX - 1 - h);
    } else if (block::isStagingCode(h, members)) {
      v.failure[r] = -2;  // a member this rank could not serve: not a non-finite value
      other = true;
    } else {
      // Only a malformed block can carry such a header.
      MGS_ENSURE(v.malformedRank >= 0 && v.malformedRank <= r, kInternal,
                 "device scatter verdict: rank " << r << "'s header " << h << " is neither a count <= " << cap
                                                 << " nor a failure code, yet no block was found malformed");
      continue;
    }
    failed = true;
  }
  // The kind the headers imply (decideKernel's rule), cross-checked.
  VerdictKind expect = VerdictKind::kOk;
  if (v.malformedRank >= 0)
    expect = VerdictKind::kMalformed;
  else if (failed)
    expect = !other && propagate ? VerdictKind::kNaNWritten : VerdictKind::kFailed;
  MGS_ENSURE(expect == v.kind, kInternal,
             "device scatter verdict: kind " << kind << " but the headers imply " << static_cast<uint64_t>(expect));
  *out = std::move(v);
  return Status::OK();
}

Status verdictStatus(const BucketVerdict& v, const std::vector<BucketMember>& members, const std::string& bucket) {
  if (v.kind == VerdictKind::kOk || v.kind == VerdictKind::kNaNWritten) return Status::OK();
  if (v.kind == VerdictKind::kMalformed)
    return Status(Code::kCommunication, "sparse allreduce of " + bucket + ": rank " + std::to_string(v.malformedRank) +
                                            " sent a malformed block (torn, a count above the capacity, an index "
                                            "outside the bucket or a non-finite value); nothing was written");
  std::string failed;
  bool other = false;
  for (size_t r = 0; r < v.failure.size(); ++r) {
    const int f = v.failure[r];
    if (f == -1) continue;
    std::string what;
    if (f == -2) {
      other = true;
      what = "failed before the exchange (its log says why)";
    } else {
      const std::string name = static_cast<size_t>(f) < members.size() ? members[f].name : "?";
      what = "has NaN or Inf in tensor '" + name + "'";
    }
    failed += std::string(failed.empty() ? "" : "; ") + "rank " + std::to_string(r) + " " + what;
  }
  if (other) return Status(Code::kInternal, "sparse allreduce of " + bucket + ": " + failed);
  return Status(Code::kNumeric, "non-finite input in sparse allreduce of " + bucket + ": " + failed +
                                    "; nothing was reduced, residuals unchanged (MGS_NONFINITE=error)");
}

}  // namespace mgs::cuda
