// Device side of the one-pass GPU selector (select_kernels.cu). Plain host
// header: streams are void* (cudaStream_t), results are cudaError_t as int.
// enqueueSelect() only enqueues kernels on `stream`: no allocation, no host
// synchronisation, no device-to-host copy. The count, the failure code and the
// DeviceSelectInfo are written on the device by the last kernel.
#pragma once

#include <cstddef>
#include <cstdint>

#include "mgs/mgs.h"
#include "select_plan.h"

namespace mgs::cuda::kernels {

// Sizes the workspace layout needs from CUB (tile status of the two
// decoupled look-back scans) and from the kernels (their state block).
size_t selectStateBytes();
int selectTileBytes(size_t fusedTiles, size_t compactTiles, size_t* bytes32, size_t* bytes64);

struct SelectBuffers {
  const void* x = nullptr;  // nullptr: in place (r already holds acc)
  mgs_dtype_t dtype = MGS_FLOAT32;
  float* r = nullptr;
  float* outValues = nullptr;
  uint32_t* outIndices = nullptr;
  uint32_t* d_count = nullptr;         // required: selected entries
  int32_t* d_failure = nullptr;        // optional: 0 or an mgs::Code
  DeviceSelectInfo* d_info = nullptr;  // optional
};

// n = p.n >= 1. workspace: l.total bytes, 256-byte aligned.
// The histogram passes run as one cooperative launch where the device allows
// it, else as cfg.maxPasses launches; the compaction's grid is sized to the
// candidate list. Neither has run on a GPU yet (2026-11-27).
int enqueueSelect(const SelectPlan& p, const SelectLayout& l, void* workspace, const SelectBuffers& b, void* stream);

// Asks the current device what the launch shapes need (cached per device).
// enqueueSelect asks too; calling this first keeps the query out of a stream
// capture. Returns a cudaError_t as int.
int prepareSelectLaunches();

// Tests and benchmarks: true restores the launch shapes that ran on an H100
// (one launch per histogram pass, one compaction block per tile of the
// buffer), to compare both bitwise and to time both in one run. Process-wide.
void setPerPassLaunchesForTesting(bool on);

}  // namespace mgs::cuda::kernels
