// Allreduce of a few bytes (the negotiation's ready bits every cycle, the
// fused small dense tensors, calibration's probes) by point-to-point messages,
// for latency: each hop on commodity Ethernet costs a link latency, and
// Open MPI 4.1's nonblocking allreduce (libnbc) takes a binomial reduce and
// then a binomial broadcast, 2 log2(P) hops.
//
//   P <= kSmallDirectMaxRanks: every rank sends its buffer to every other rank
//     and reduces all P in rank order itself: one hop.
//   larger P: recursive doubling (the ranks past the largest power of two
//     first fold into a partner and get the result back at the end):
//     log2(P) hops, +2 where P is not a power of two.
//
// Both give every rank bitwise the same result, whatever the operation:
// the direct exchange reduces x0 op x1 op ... in rank order on every rank,
// and in recursive doubling both partners of a step compute
// (lower group's value) op (higher group's value).
//
// Measured on the emulated cluster (10 Gbit/s, 0.5 ms per link, so 1 ms a
// hop; 32 bytes, BAND, median of the slowest rank):
//   P = 16: libnbc 11.3 ms, recursive doubling 7.6 ms, direct 5.1 ms;
//   P = 32: libnbc 17.6 ms, recursive doubling 12.6 ms, direct 26.0 ms
//           (992 messages through an emulator sharing 2 cores).
#pragma once

#include <mpi.h>

#include <cstddef>
#include <vector>

#include "comm/communicator.h"
#include "comm/mpi/mpi_util.h"

namespace mgs {

constexpr size_t kSmallAllreduceMaxBytes = size_t{8} << 10;
constexpr int kSmallDirectMaxRanks = 16;

// In place over `count` elements of `dtype` (count * dtypeSize <=
// kSmallAllreduceMaxBytes; reducible(dtype, op)). `scratch` is reused across
// calls. Collective over `comm`; uses tag `tag` for its point-to-point
// messages (no other traffic on `comm` may use it). `direct_max_ranks` is
// the largest P that takes the direct exchange (tests lower it to run
// recursive doubling at small P).
Status smallAllreduce(MPI_Comm comm, int rank, int size, void* buf, size_t count, DataType dtype, CommOp op,
                      const WaitPolicy& wait, int tag, std::vector<char>* scratch,
                      int direct_max_ranks = kSmallDirectMaxRanks);

}  // namespace mgs
