// The exchange stage of the sparse pipeline (docs/architecture.md "Sparse
// pipeline stages"): moves the typed blocks (core/sparse_block.h) between
// ranks, written only against Communicator. Today:
//  - the fixed-block allgather: every rank's [count | values | indices | seal]
//    block of the same size, started, tested and finished asynchronously so
//    the coordinator goes on (the next bucket's selection, negotiation);
//  - the agreed exchange's index block, broadcast by the bucket's leader
//    (its values' allreduce is run by exchange_agreed.cc);
//  - which exchanges MGS_EXCHANGE allows: those, the hierarchical exchange
//    (exchange_hierarchical.cc: its leaders' blocks are this allgather's) and
//    a dense allreduce.
// Every received block is validated here before anyone reads it: every rank
// holds the same bytes, so every rank takes the same verdict.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "comm/communicator.h"
#include "common/params.h"
#include "core/request.h"
#include "core/sparse_block.h"
#include "core/sparse_progress.h"
#include "plan/cost_model.h"

namespace mgs {

// plan::kExchange* bits allowed by MGS_EXCHANGE and MGS_DENSE_FALLBACK. The
// choice among them, per bucket, is the job's cost model's
// (JobCostModel::exchangeFor, core/job_cost_model.h).
unsigned allowedExchanges(const Config& config, int P);

class BlockExchange {
 public:
  // Allgathers in flight at most (the pipeline finishes the oldest first).
  static constexpr size_t kMaxInFlight = 4;

  // `progress` holds the agreed buckets' turns (a checkpoint reads and
  // restores them there); null: an own one.
  explicit BlockExchange(Communicator& comm, SparseProgress* progress = nullptr)
      : comm_(comm), progress_(progress ? progress : &own_progress_) {}

  // Pooled byte buffers (no allocation in steady state). New bytes are
  // zero-filled: padding is sent but never read.
  std::vector<char> takeBuffer(size_t bytes);
  void giveBuffer(std::vector<char>&& b);

  // One fixed-block allgather.
  struct Allgather {
    size_t cap = 1;
    // Blocks received: 0 means one per rank; the hierarchical exchange
    // receives one per node (exchange_hierarchical.cc).
    int blocks = 0;
    std::vector<char> send, recv;  // one block; P blocks in rank order
    std::unique_ptr<PendingCollective> op;
    Status start;
    Clock::time_point started;
    size_t blockBytes() const { return block::allgatherBytes(cap); }
    block::ConstAllgatherBlock received(int r) const {
      return block::ConstAllgatherBlock(recv.data() + static_cast<size_t>(r) * blockBytes(), cap);
    }
  };
  // a.send holds this rank's finished block (LocalStage::run packed it).
  void start(Allgather& a);
  // Whether finish() would return without waiting (done, or failed).
  bool ready(Allgather& a);
  Status finish(Allgather& a);
  // Every received block well formed: the seal, the header (a count <= cap
  // or a failure code), indices < n and finite values. Names the first bad
  // rank; `name` is the bucket's (bucketName).
  Status validate(const Allgather& a, size_t n, size_t members, const std::string& name) const;
  // Buffers back to the pool.
  void release(Allgather& a);
  // After a fatal error: the collective may still be writing into the
  // buffers (a peer may be gone), so they are leaked, never freed or reused.
  static void abandon(Allgather& a);

  // The agreed exchange's index block, `block` (indexBytes(cap) bytes): the
  // leader's finished block is broadcast (started here, on the pipeline's
  // communicator, in bucket order), then checked on every rank once it has
  // arrived (seal, header, indices < n, no index twice).
  Status startIndexBroadcast(std::vector<char>& block, size_t cap, int leader, std::unique_ptr<PendingCollective>* op);
  Status checkIndex(const std::vector<char>& block, size_t cap, int leader, size_t n, size_t members,
                    const std::string& name);

  // The agreed bucket `name`'s leader: its name's hash plus the times it was
  // applied, mod P. A function of the bucket alone, not of the order buckets
  // are negotiated in (which timing decides), so runs are reproducible
  // bitwise; the same on every rank; rotating over ranks step by step, and
  // spread over ranks within a step. A bucket some rank's flag stopped (a
  // skipped loss-scaling step) is not counted as applied (agreedApplied is
  // not called), so it leaves the next leaders as it leaves the residuals.
  int agreedLeader(const std::string& name) const;
  void agreedApplied(const std::string& name);

 private:
  Communicator& comm_;
  std::vector<std::vector<char>> pool_;
  std::vector<uint64_t> seen_;  // bitmap for duplicate indices (kept zero)
  // Per agreed bucket: how many times it was applied (bounded there).
  SparseProgress own_progress_;
  SparseProgress* progress_;
};

}  // namespace mgs
