// Allreduce of a few bytes (the negotiation's ready bits every cycle, the
// fused small dense tensors, calibration's probes) by recursive doubling over
// point-to-point messages: log2(P) hops (+2 where P is not a power of two:
// the ranks past the largest power of two fold into a partner first and get
// the result back at the end). Open MPI 4.1's nonblocking allreduce (libnbc)
// takes a binomial reduce and then a binomial broadcast, 2 log2(P) hops, and
// each hop on commodity Ethernet costs a link latency.
//
// Every rank ends with bitwise the same result, whatever the operation (a
// float sum, a max meeting a NaN): both partners of a step compute
// (lower ranks' value) op (higher ranks' value).
//
// Measured on the emulated cluster (10 Gbit/s, 0.5 ms per link, so 1 ms a
// hop; 32 bytes of BAND, median of the slowest rank;
// bench/collectives/small_allreduce_bench.cc, docs/benchmarks.md):
//   P = 4: libnbc 5.5 ms, recursive doubling 3.8 ms;
//   P = 16: 11.3 and 7.6 ms; P = 32: 17.9 and 12.3 ms.
// Sending every rank's bytes to every other rank (one hop) measured 4.5 ms at
// P = 16 alone, but made the 16-host replay's steps slower (104 ms against
// 89 with libnbc; 240 messages a round through 2 shared cores), so it is not
// used. Below kSmallAllreduceMinRanks MPI's own algorithm stays: there the
// hops are few and the 4-rank training benchmarks were measured with it.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <vector>

#include "comm/communicator.h"
#include "comm/mpi/mpi_util.h"

namespace mgs {

constexpr size_t kSmallAllreduceMaxBytes = size_t{8} << 10;
constexpr int kSmallAllreduceMinRanks = 5;

// In place over `count` elements of `dtype` (count * dtypeSize <=
// kSmallAllreduceMaxBytes; reducible(dtype, op)). `scratch` is reused across
// calls. Collective over `comm`; uses tag `tag` for its point-to-point
// messages (no other traffic on `comm` may use it). Any P >= 1 works (the
// communicator calls it from kSmallAllreduceMinRanks on; tests call it at 2..4).
Status smallAllreduce(MPI_Comm comm, int rank, int size, void* buf, size_t count, DataType dtype, CommOp op,
                      const WaitPolicy& wait, int tag, std::vector<char>* scratch);

}  // namespace mgs
