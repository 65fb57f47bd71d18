// One run of a local stage (host or CUDA) on a bucket of n values with an
// allgather block, as the GPU tests compare them: the outcome, the block it
// packed, and what its slab keeps. The slab is handed back for the caller to
// settle (commit or not) once it has read what it needs.
#pragma once

#include <catch2/catch.hpp>

#include <memory>
#include <vector>

#include "compress/selector.h"
#include "core/local_stage.h"
#include "core/sparse_block.h"

namespace mgs::test {

struct LocalRun {
  Status status;
  std::vector<char> block;
  std::vector<float> kept;
  size_t count = 0;
  int bad_member = -1;
  std::unique_ptr<LocalSlab> slab;
};

inline LocalRun runLocal(LocalStage& stage, std::vector<Request>& members, size_t n, const compress::Selector& sel) {
  LocalRun r;
  const size_t cap = sel.maxCount(n);
  r.block.assign(block::allgatherBytes(cap), 0);
  LocalJob job;
  job.members = &members;
  job.n = n;
  job.select = true;
  job.selector = &sel;
  job.cap = cap;
  job.block = r.block.data();
  job.name = "bucket";
  LocalOutcome out;
  stage.run(job, &out);
  r.status = out.status;
  r.count = out.count;
  r.bad_member = out.bad_member;
  r.kept.resize(n);
  if (out.slab) REQUIRE(stage.readSlab(*out.slab, r.kept.data()).ok());
  r.slab = std::move(out.slab);
  return r;
}

}  // namespace mgs::test
