// Ring allreduce over MPI point-to-point (reduce-scatter, then allgather):
// each rank sends 2(P-1)/P of the buffer, whatever P, the bandwidth optimum
// that a dense gradient on commodity Ethernet needs. mgs runs its own rather
// than Open MPI's for three reasons: Open MPI's tuned component picked
// recursive doubling / in-place binomial for gradient-sized buffers on TCP
// (issue 11: 2.65 s against 1.98 s for its own ring on a ResNet-50 step, 4 emulated
// 1 Gbit/s hosts); its blocking calls busy-poll cores that training needs
// (here every wait sleeps, mpi_util.h); and it has no 16-bit float sum, so
// f16/bf16 would have to cross as float32.
//
// Each segment is reduced in ring order by one rank and then forwarded, so
// every rank ends with bitwise the same result. A segment goes as up to
// kRingChunks messages, and each chunk is pipelined through the steps on
// its own: reduced as it arrives and sent on at once, so the reduction
// overlaps the transfer and the link does not idle between steps.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "comm/mpi/mpi_util.h"

namespace mgs {

constexpr int kRingChunks = 8;
constexpr size_t kRingChunkBytes = size_t{256} << 10;  // below this per chunk, fewer chunks

// In place over `count` elements of `dtype` (count * dtypeSize < 2^31 per
// message is guaranteed by the chunking for any count <= 2^30). `scratch` is
// reused across calls. Collective over `comm`; uses tags [tag, tag + kRingChunks).
Status ringAllreduce(MPI_Comm comm, int rank, int size, void* buf, size_t count, DataType dtype, CommOp op,
                     const WaitPolicy& wait, int tag, std::vector<char>* scratch);
// The ring as a nonblocking collective (Communicator::startAllreduce): start()
// posts the first messages and returns; each test() moves on, without
// blocking, the chunks whose pieces have arrived (reduced and sent on as in
// the blocking form, so the result is bitwise the same), and wait() blocks
// to the end. A piece moves on only when the ring is tested, so the caller
// tests often (the coordinator: every negotiation cycle and in the waits of
// negotiation, Executor::poll). Rings in flight at once on one
// communicator need tag ranges of their own.
class RingAllreduce final : public PendingCollective {
 public:
  RingAllreduce();
  ~RingAllreduce() override;
  class Steps;
  // Uses tags [tag, tag + kRingChunks); `slot` is the ring last started on
  // them, finished here first if it is still running.
  Status start(MPI_Comm comm, int rank, int size, void* buf, size_t count, DataType dtype, CommOp op,
               const WaitPolicy& wait, int tag, std::weak_ptr<Steps>* slot);
  Status test(bool* done) override;
  Status wait() override;

 private:
  std::shared_ptr<Steps> steps_;
};

// The ring's first half only, over the parts `bounds` gives (size + 1
// element offsets, bounds[0] = 0, bounds[size] = count): in place, and when
// it returns this rank's part [bounds[rank], bounds[rank + 1]) of `buf` holds
// the reduction of every rank's (the rest of `buf` is scratch). Each rank
// sends (P-1)/P of the buffer, half the allreduce's traffic.
Status ringReduceScatter(MPI_Comm comm, int rank, int size, void* buf, const std::vector<size_t>& bounds,
                         DataType dtype, CommOp op, const WaitPolicy& wait, int tag, std::vector<char>* scratch);

}  // namespace mgs
