// The agreed exchange's parts of the CUDA local stage (exchange_agreed.cc
// runs the exchange; cuda_local_stage.h the stage). A bucket of CUDA
// tensors that takes the agreed exchange keeps its gradient and residual on
// the GPU: every rank fuses into a device slab; the leader selects there
// and only its count indices and values reach the host for the index
// broadcast and the values' allreduce (MPI); the others send the leader's
// indices to the device and bring back their values (gather, the entries
// left +0 in the slab); the summed values go back to the device for the
// scatter. Bytes across PCIe per bucket: about 8 * count each way, against
// 4 * n twice when the bucket is staged.
//
// Written 2026-12-01 without a GPU: never run on one. The pipeline's side
// (routing, residuals, verdicts, path counts) is tested on the CPU with a
// stand-in resident stage (tests/unit/core/device_bucket_test.cc, "agreed");
// tests/gpu/local_stage_gpu_test.cc compares these parts with the host
// stage bit for bit on the first GPU.
#include <cuda_runtime.h>

#include <cstring>

#include "common/cuda_check.h"
#include "core/sparse_block.h"
#include "cuda_local_stage.h"
#include "cuda_local_stage_parts.h"
#include "host_sync.h"

namespace mgs::cuda {

std::vector<BucketMember> CudaLocalStage::outputMembers(const std::vector<Request>& members,
                                                        const std::vector<double>& factors) {
  std::vector<BucketMember> bm(members.size());
  for (size_t i = 0; i < members.size(); ++i) {
    const Request& m = members[i];
    bm[i].name = m.name;
    bm[i].d_out = m.output.data;
    bm[i].dtype = m.output.dtype;
    bm[i].count = m.output.numel();
    bm[i].outFactor = factors[i];
  }
  return bm;
}

Status CudaLocalStage::runAgreed(const LocalJob& job, LocalOutcome* out, BufPtr* acc) {
  const std::vector<Request>& members = *job.members;
  const size_t n = job.n, cap = job.cap, M = members.size();
  const bool lead = job.select;
  MGS_CUDA_CHECK(cudaSetDevice(device_));
  auto lk = opt_.residuals->lock();
  Scratch scratch{engine_->pool(), {}};
  // The leader selects into a device block of the allgather layout; only
  // its count entries are read on the host.
  void* d_block = nullptr;
  if (lead) MGS_RETURN_IF_ERROR(scratch.take(block::allgatherBytes(cap), &d_block));
  MGS_RETURN_IF_ERROR(enqueueLocalPart(job, d_block, nullptr, acc, &scratch.bufs));
  cudaStream_t stream = asStream(engine_->stream());
  words_.resize((M + 1) * sizeof(uint32_t));
  MGS_CUDA_CHECK(
      cudaMemcpyAsync(words_.data(), engine_->localWords(), words_.size(), cudaMemcpyDeviceToHost, stream));
  if (lead) {
    // The header first; the entries once the count is known (a second copy
    // of 8 * count bytes rather than 8 * cap).
    agreed_block_.resize(block::allgatherBytes(cap));
    MGS_CUDA_CHECK(cudaMemcpyAsync(agreed_block_.data(), d_block, 8, cudaMemcpyDeviceToHost, stream));
  }
  MGS_RETURN_IF_ERROR(syncStream(engine_->stream()));
  size_t nf = 0;
  int first_bad = -1;
  for (size_t m = 0; m < M; ++m) {
    nf += localWord(m);
    if (localWord(m) && first_bad < 0) first_bad = static_cast<int>(m);
  }
  if (!lead) {  // fused only: a non-finite value is this rank's failure (its flag)
    if (first_bad >= 0) {
      out->bad_member = first_bad;
      out->non_finite = nf;
      out->status = nonFiniteStatus(opt_.rank, members, first_bad, nf, n);
    }
    return Status::OK();
  }
  out->selected = true;
  out->k = compress::kForDensity(n, job.selector->options().density);
  uint64_t header = 0;
  std::memcpy(&header, agreed_block_.data(), 8);
  const block::Header h = block::decodeHeader(header, cap, M);
  const block::IndexBlock ib(job.block, cap);
  if (h.kind == block::Header::kCount) {
    if (h.count) {
      MGS_CUDA_CHECK(cudaMemcpyAsync(job.agreed_values, static_cast<const char*>(d_block) + block::valuesOffset(),
                                     h.count * sizeof(float), cudaMemcpyDeviceToHost, stream));
      MGS_CUDA_CHECK(cudaMemcpyAsync(ib.indices(), static_cast<const char*>(d_block) + block::indicesOffset(cap),
                                     h.count * sizeof(uint32_t), cudaMemcpyDeviceToHost, stream));
      MGS_RETURN_IF_ERROR(syncStream(engine_->stream()));
    }
    ib.finish(h.count);
    out->count = h.count;
    out->reported = h.count;
    return Status::OK();
  }
  ib.finish(failedSelection(members, h, nf, n, out));
  return Status::OK();
}

Status CudaLocalStage::extract(LocalSlab& slab, const uint32_t* idx, size_t count, float* vals) {
  auto& s = static_cast<Slab&>(slab);
  MGS_ENSURE(s.buf != nullptr, kInternal, "device slab without memory (its bucket failed before fusing)");
  if (count == 0) return Status::OK();
  MGS_CUDA_CHECK(cudaSetDevice(device_));
  cudaStream_t stream = asStream(engine_->stream());
  Scratch scratch{engine_->pool(), {}};
  void *d_idx = nullptr, *d_vals = nullptr;
  MGS_RETURN_IF_ERROR(scratch.take(count * sizeof(uint32_t), &d_idx));
  MGS_RETURN_IF_ERROR(scratch.take(count * sizeof(float), &d_vals));
  MGS_CUDA_CHECK(cudaMemcpyAsync(d_idx, idx, count * sizeof(uint32_t), cudaMemcpyHostToDevice, stream));
  MGS_RETURN_IF_ERROR(engine_->enqueueGatherZero(static_cast<float*>(s.buf->p), static_cast<const uint32_t*>(d_idx),
                                                 count, static_cast<float*>(d_vals)));
  MGS_CUDA_CHECK(cudaMemcpyAsync(vals, d_vals, count * sizeof(float), cudaMemcpyDeviceToHost, stream));
  return syncStream(engine_->stream());
}

Status CudaLocalStage::scatterAgreed(const std::vector<Request>& members, const uint32_t* idx, const float* vals,
                                     size_t count, const std::vector<double>& factors) {
  MGS_ENSURE(factors.size() == members.size(), kInvalidArgument, "device agreed scatter: one factor per member");
  MGS_CUDA_CHECK(cudaSetDevice(device_));
  cudaStream_t stream = asStream(engine_->stream());
  Scratch scratch{engine_->pool(), {}};
  void *d_idx = nullptr, *d_vals = nullptr;
  if (count) {
    MGS_RETURN_IF_ERROR(scratch.take(count * sizeof(uint32_t), &d_idx));
    MGS_RETURN_IF_ERROR(scratch.take(count * sizeof(float), &d_vals));
    MGS_CUDA_CHECK(cudaMemcpyAsync(d_idx, idx, count * sizeof(uint32_t), cudaMemcpyHostToDevice, stream));
    MGS_CUDA_CHECK(cudaMemcpyAsync(d_vals, vals, count * sizeof(float), cudaMemcpyHostToDevice, stream));
  }
  MGS_RETURN_IF_ERROR(engine_->enqueueAgreedScatter(outputMembers(members, factors), static_cast<const uint32_t*>(d_idx),
                                                    static_cast<const float*>(d_vals), count));
  return syncStream(engine_->stream());
}

}  // namespace mgs::cuda
