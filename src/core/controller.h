// Negotiation: decides, once per cycle and identically on every rank, which
// named operations are ready on all ranks and in which order they run.
//
// Fast path (steady state): every pending request whose name and signature are
// in the response cache sets its bit; one bitwise-AND allreduce of the bit
// vector gives the names ready everywhere, run in bit order. Word 0 of the
// vector carries two flags that are ANDed too: "nothing needs the slow path"
// and "nobody is shutting down".
//
// Slow path (new names, changed signatures, stalls): every rank sends all its
// not-yet-reported requests to rank 0, which records which ranks have which
// names, validates those submitted by all ranks, runs the stall inspector, and
// broadcasts an ordered response list. Rank 0 keeps forcing the slow path
// while some name is reported by only some ranks, so no rank can be waiting on
// a bit that another rank will never set.
//
// Process sets: an op of a set waits for the set's ranks only; a rank outside
// the set that submits its name fails it on every rank (and the set's ranks
// that submit it later fail too). Such ops always take the slow path (ranks
// outside the set never set their bits), and the response list reaches every
// rank: a rank skips the ones it has not submitted.
//
// Join: while a rank has joined, an op of the global set is ready once every
// rank that has not joined submitted it. An allreduce then runs on the
// joined ranks too, with zeros (the response carries its signature, and
// those ranks build the request themselves; a CUDA allreduce's zeros are on
// the host for the staged path, on the NCCL device for NCCL); any other op
// fails on every rank, naming the joined ranks (Horovod's join). The join op
// completes when every rank joined, with the last rank to join.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "common/params.h"
#include "core/process_sets.h"
#include "core/request.h"
#include "core/response_cache.h"
#include "core/stall_inspector.h"

namespace mgs {

struct ReadyOp {
  Request req;
  Status status;  // OK: execute; otherwise complete the handle with it
};

struct CycleResult {
  std::vector<ReadyOp> ready;  // same names, same order on every rank
  bool shutdown = false;       // some rank asked to shut down: everyone stops
  // With shutdown: every rank's shutdown word (0: that rank did not ask), so
  // every rank can say who stopped the job and why.
  std::vector<int32_t> shutdown_words;
};

struct ControllerStats {
  uint64_t fast_cycles = 0;
  uint64_t slow_cycles = 0;
  uint64_t cached_names = 0;     // names in the response cache now
  uint64_t cache_evictions = 0;  // names evicted from it so far
};

class Controller {
 public:
  Controller(Communicator& comm, const Config& config, size_t cache_capacity = ResponseCache::kDefaultCapacity);

  // One negotiation round. Collective: every rank calls it once per cycle.
  // `shutdown_word` != 0 asks every rank to stop; its value (the caller's
  // encoding of why) reaches every rank in out->shutdown_words.
  Status cycle(std::vector<Request> incoming, int32_t shutdown_word, CycleResult* out);
  // Requests still pending (after shutdown or a fatal error).
  std::vector<Request> takePending();
  ControllerStats stats() const;
  size_t pendingCount() const { return pending_.size(); }
  // Where rank 0 finds the process sets (the runtime's table); without it
  // only the global set exists.
  void setProcessSets(const ProcessSetTable* sets) { sets_ = sets; }
  // The name of a request of process set `id` pending on this rank, or "".
  std::string pendingInSet(int32_t id) const;
  // A process set was removed: forget what rank 0 kept about its names.
  void forgetSet(int32_t id);
  // Nothing submitted here and (rank 0) nothing reported by any rank.
  bool idle() const { return pending_.empty() && table_.empty(); }

 private:
  struct Pending {
    Request req;
    int64_t cache_bit = -1;
    bool reported = false;
  };

  Status slowPath(CycleResult* out);
  // Rank 0: whether an op it holds can only be decided by a slow cycle.
  bool tableNeedsSlowPath() const;
  // Rank 0: the reports in, the response list out (controller_responses.cc).
  std::string buildResponses(const std::vector<std::string>& reports);
  // The members of process set `id` as a per-rank mask (false if unknown).
  bool membersOf(int32_t id, std::vector<bool>* mask, ProcessSetInfo* info) const;

  Communicator& comm_;
  const Config config_;
  StallInspector stall_;
  double stale_cached_s_;
  ResponseCache cache_;
  uint64_t tick_ = 0;  // cycles so far: the same count on every rank
  std::map<std::string, Pending> pending_;
  // Rank 0 only: names reported by some ranks, with each rank's signature.
  struct Negotiation {
    StallEntry stall;
    std::vector<Signature> sigs;
    int count = 0;
    int expected = 0;     // ranks of its process set
    int32_t process_set = 0;
  };
  std::map<std::string, Negotiation> table_;
  // Rank 0 only: names a rank outside their process set submitted, with the
  // error, and the set's ranks that have not been told yet.
  struct Poisoned {
    std::string message;
    int32_t process_set = 0;
    std::vector<bool> untold;
  };
  std::map<std::string, Poisoned> poisoned_;
  // Rank 0 only: ranks that joined (their join op is in table_), and the last.
  std::vector<bool> joined_;
  int last_joined_ = -1;
  const ProcessSetTable* sets_ = nullptr;
  ControllerStats stats_;
};

}  // namespace mgs
