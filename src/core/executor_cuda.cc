// CUDA tensors' dense collectives on the coordinator thread (see executor.h):
// host-staged over MPI, or on device pointers over NCCL, one tensor or a
// fused group of small ones.
#include <cstring>

#include "common/check.h"
#include "core/device.h"
#include "core/executor.h"
#include "core/fusion.h"

namespace mgs {

Status Executor::allreduceCuda(Request& r) {
  const Signature& sig = r.sig;
  const size_t n = r.input.numel();
  auto t0 = Clock::now();
  if (r.served) {
    // This rank has joined: its part is the zeros of the served request's
    // host buffer (controller.cc servedRequest), and the others' staged
    // allreduce is the same MPI collective, so no device memory is needed.
    MGS_RETURN_IF_ERROR(agreeFinite({&r}, {r.input.data}));
    packFusion({r.input.data}, {n}, sig.dtype, sig.prescale, &wire_);
    MGS_RETURN_IF_ERROR(comm_.allreduce(wire_.data(), n, sig.dtype, CommOp::kSum));
    span({&r}, "ALLREDUCE", t0);
    return Status::OK();
  }
  MGS_RETURN_IF_ERROR(device::waitReady(r.input));
  stage_.resize(r.input.bytes());
  MGS_RETURN_IF_ERROR(device::copyToHost(stage_.data(), r.input, stage_.size()));
  MGS_RETURN_IF_ERROR(agreeFinite({&r}, {stage_.data()}));
  packFusion({stage_.data()}, {n}, sig.dtype, sig.prescale, &wire_);
  span({&r}, "MEMCPY_IN_HOST_STAGING", t0);
  t0 = Clock::now();
  MGS_RETURN_IF_ERROR(comm_.allreduce(wire_.data(), n, sig.dtype, CommOp::kSum));
  span({&r}, "ALLREDUCE", t0);
  t0 = Clock::now();
  unpackFusion(wire_, sig.dtype, 1.0, {stage_.data()}, {n});
  MGS_RETURN_IF_ERROR(device::copyFromHost(r.output, stage_.data(), stage_.size()));
  MGS_RETURN_IF_ERROR(device::scale(r.output, finalFactor(sig)));
  span({&r}, "MEMCPY_OUT_HOST_STAGING", t0);
  return Status::OK();
}

namespace {
// Each member's element count, in group order; returns their sum.
size_t memberCounts(const std::vector<Request*>& group, std::vector<size_t>* counts) {
  size_t total = 0;
  counts->clear();
  for (Request* r : group) {
    counts->push_back(r->input.numel());
    total += counts->back();
  }
  return total;
}
}  // namespace

Status Executor::allreduceCudaGroup(std::vector<Request*>& group) {
  const Signature& sig = group[0]->sig;
  const size_t esize = dtypeSize(sig.dtype);
  std::vector<size_t> counts;
  const size_t total = memberCounts(group, &counts);
  auto t0 = Clock::now();
  // One host buffer for the group; each member lands at its offset. A rank
  // that has joined serves host zeros (the same group forms on every rank:
  // negotiated signatures and sizes) and has no outputs to write.
  wire_.resize(total * esize);
  std::vector<const void*> inputs;
  size_t off = 0;
  for (size_t i = 0; i < group.size(); ++i) {
    Request& r = *group[i];
    char* at = wire_.data() + off * esize;
    if (r.served) {
      if (counts[i]) std::memcpy(at, r.input.data, counts[i] * esize);
    } else {
      MGS_RETURN_IF_ERROR(device::waitReady(r.input));
      MGS_RETURN_IF_ERROR(device::copyToHost(at, r.input, counts[i] * esize));
    }
    inputs.push_back(at);
    off += counts[i];
  }
  MGS_RETURN_IF_ERROR(agreeFinite(group, inputs));
  scaleHost(wire_.data(), sig.dtype, total, sig.prescale);
  span(group, "MEMCPY_IN_HOST_STAGING", t0);
  t0 = Clock::now();
  MGS_RETURN_IF_ERROR(comm_.allreduce(wire_.data(), total, sig.dtype, CommOp::kSum));
  span(group, "ALLREDUCE", t0);
  if (group[0]->served) return Status::OK();
  t0 = Clock::now();
  scaleHost(wire_.data(), sig.dtype, total, finalFactor(sig));
  off = 0;
  for (size_t i = 0; i < group.size(); ++i) {
    MGS_RETURN_IF_ERROR(device::copyFromHost(group[i]->output, wire_.data() + off * esize, counts[i] * esize));
    off += counts[i];
  }
  span(group, "MEMCPY_OUT_HOST_STAGING", t0);
  return Status::OK();
}

Status Executor::allreduceNcclGroup(std::vector<Request*>& group, device::DeviceComm& dc) {
  const Signature& sig = group[0]->sig;
  const size_t esize = dtypeSize(sig.dtype);
  std::vector<size_t> counts;
  const size_t total = memberCounts(group, &counts);
  auto t0 = Clock::now();
  if (group[0]->served) {
    // This rank has joined: zeros of the group's fused size on its device.
    std::vector<const void*> inputs;
    for (Request* r : group) inputs.push_back(r->input.data);  // host zeros
    MGS_RETURN_IF_ERROR(agreeFinite(group, inputs));
    std::shared_ptr<void> zeros;
    MGS_RETURN_IF_ERROR(device::deviceZeros(dc.device, total * esize, &zeros));
    MGS_RETURN_IF_ERROR(dc.comm->allreduce(zeros.get(), total, sig.dtype, CommOp::kSum));
    MGS_RETURN_IF_ERROR(device::syncStream(dc.stream));
    span(group, "NCCL_ALLREDUCE", t0);
    return Status::OK();
  }
  for (Request* r : group)
    MGS_ENSURE(r->input.device == dc.device && r->output.device == dc.device, kInvalidArgument,
               "tensor '" << r->name << "' is on CUDA device " << r->input.device
                          << " but this rank's NCCL communicator uses device " << dc.device
                          << " (local rank % visible devices)");
  if (config_.nonfinite == "error" && dtypeIsFloat(sig.dtype)) {
    // As allreduceNccl: the check reads the inputs on the host.
    stage_.resize(total * esize);
    std::vector<const void*> inputs;
    size_t off = 0;
    for (size_t i = 0; i < group.size(); ++i) {
      MGS_RETURN_IF_ERROR(device::waitReady(group[i]->input));
      MGS_RETURN_IF_ERROR(device::copyToHost(stage_.data() + off * esize, group[i]->input, counts[i] * esize));
      inputs.push_back(stage_.data() + off * esize);
      off += counts[i];
    }
    MGS_RETURN_IF_ERROR(agreeFinite(group, inputs));
  }
  if (fusion_dev_bytes_ < total * esize || fusion_dev_device_ != dc.device) {
    // Grown to the largest group seen (at most MGS_FUSION_THRESHOLD_BYTES);
    // the previous group finished with a stream sync, so it is free.
    fusion_dev_.reset();
    fusion_dev_bytes_ = 0;
    MGS_RETURN_IF_ERROR(device::deviceZeros(dc.device, total * esize, &fusion_dev_));
    fusion_dev_bytes_ = total * esize;
    fusion_dev_device_ = dc.device;
  }
  TensorDesc buf;
  buf.data = fusion_dev_.get();
  buf.dtype = sig.dtype;
  buf.shape = {static_cast<int64_t>(total)};
  buf.device = dc.device;
  auto slice = [&](size_t off, size_t n) {
    TensorDesc t = buf;
    t.data = static_cast<char*>(buf.data) + off * esize;
    t.shape = {static_cast<int64_t>(n)};
    return t;
  };
  auto flat = [](const TensorDesc& t, size_t n) {
    TensorDesc f = t;
    f.shape = {static_cast<int64_t>(n)};
    return f;
  };
  size_t off = 0;
  for (size_t i = 0; i < group.size(); ++i) {
    MGS_RETURN_IF_ERROR(device::streamWaitReady(group[i]->input, dc.stream));
    MGS_RETURN_IF_ERROR(device::copyDeviceAsync(slice(off, counts[i]), flat(group[i]->input, counts[i]), dc.stream));
    off += counts[i];
  }
  MGS_RETURN_IF_ERROR(device::scaleAsync(buf, sig.prescale, dc.stream));
  MGS_RETURN_IF_ERROR(dc.comm->allreduce(buf.data, total, sig.dtype, CommOp::kSum));
  MGS_RETURN_IF_ERROR(device::scaleAsync(buf, finalFactor(sig), dc.stream));
  off = 0;
  for (size_t i = 0; i < group.size(); ++i) {
    MGS_RETURN_IF_ERROR(device::copyDeviceAsync(flat(group[i]->output, counts[i]), slice(off, counts[i]), dc.stream));
    off += counts[i];
  }
  MGS_RETURN_IF_ERROR(device::syncStream(dc.stream));
  span(group, "NCCL_ALLREDUCE", t0);
  return Status::OK();
}

device::DeviceComm* Executor::ncclFor(const Request&) {
  // Every rank asks at the same negotiated op (on_cuda is part of the
  // signature), so a lazy NCCL set-up under MGS_BACKEND=auto is collective.
  return backend_ ? backend_->forCuda() : nullptr;
}

Status Executor::allreduceNccl(Request& r, device::DeviceComm& dc) {
  const Signature& sig = r.sig;
  if (r.served) {
    // This rank has joined: it reduces zeros of its own on its NCCL device.
    // Never ran on a GPU.
    auto t0 = Clock::now();
    MGS_RETURN_IF_ERROR(agreeFinite({&r}, {r.input.data}));  // host zeros; collective where the others check
    std::shared_ptr<void> zeros;
    MGS_RETURN_IF_ERROR(device::deviceZeros(dc.device, r.input.bytes(), &zeros));
    MGS_RETURN_IF_ERROR(dc.comm->allreduce(zeros.get(), r.input.numel(), sig.dtype, CommOp::kSum));
    MGS_RETURN_IF_ERROR(device::syncStream(dc.stream));
    span({&r}, "NCCL_ALLREDUCE", t0);
    return Status::OK();
  }
  MGS_ENSURE(r.input.device == dc.device && r.output.device == dc.device, kInvalidArgument,
             "the tensor is on CUDA device " << r.input.device << " but this rank's NCCL communicator uses device "
                                             << dc.device << " (local rank % visible devices)");
  auto t0 = Clock::now();
  // MGS_NONFINITE=error needs the values on the host to agree before reducing:
  // that check stays host-staged (it reads the whole input anyway).
  if (config_.nonfinite == "error" && dtypeIsFloat(sig.dtype)) {
    MGS_RETURN_IF_ERROR(device::waitReady(r.input));
    stage_.resize(r.input.bytes());
    MGS_RETURN_IF_ERROR(device::copyToHost(stage_.data(), r.input, stage_.size()));
    MGS_RETURN_IF_ERROR(agreeFinite({&r}, {stage_.data()}));
  }
  MGS_RETURN_IF_ERROR(device::streamWaitReady(r.input, dc.stream));
  MGS_RETURN_IF_ERROR(device::copyDeviceAsync(r.output, r.input, dc.stream));
  MGS_RETURN_IF_ERROR(device::scaleAsync(r.output, sig.prescale, dc.stream));
  // Enqueued on the same stream; NCCL's own wait polls with a deadline and
  // aborts on a dead peer (src/comm/nccl/nccl_wait.h).
  MGS_RETURN_IF_ERROR(dc.comm->allreduce(r.output.data, r.output.numel(), sig.dtype, CommOp::kSum));
  MGS_RETURN_IF_ERROR(device::scaleAsync(r.output, finalFactor(sig), dc.stream));
  MGS_RETURN_IF_ERROR(device::syncStream(dc.stream));
  span({&r}, "NCCL_ALLREDUCE", t0);
  return Status::OK();
}

Status Executor::broadcastNccl(Request& r, device::DeviceComm& dc) {
  MGS_ENSURE(r.input.device == dc.device, kInvalidArgument,
             "the tensor is on CUDA device " << r.input.device << " but this rank's NCCL communicator uses device "
                                             << dc.device << " (local rank % visible devices)");
  auto t0 = Clock::now();
  // Every rank waits: non-roots overwrite the buffer the framework produced.
  MGS_RETURN_IF_ERROR(device::streamWaitReady(r.input, dc.stream));
  MGS_RETURN_IF_ERROR(dc.comm->broadcast(r.input.data, r.input.bytes(), r.sig.root));
  span({&r}, "NCCL_BROADCAST", t0);
  return Status::OK();
}

}  // namespace mgs
