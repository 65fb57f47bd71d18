// A few bytes allreduced among many ranks: Open MPI's nonblocking allreduce
// (libnbc, what the communicator used for them before) against mgs's
// recursive doubling (src/comm/mpi/small_allreduce.h), and a one-hop variant
// where every rank sends its bytes to every other (tried in the runtime and
// taken out; docs/benchmarks.md). Every wait tests and sleeps 50 us, as the
// runtime's waits do. Rank 0 prints one JSON line per algorithm: the median
// over --iters calls of the slowest rank's time, after a barrier.
//   scripts/emulated_cluster.sh -n 16 -r 10gbit -l 0.5ms -- build/bench/mgs-small-allreduce-bench
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "comm/mpi/small_allreduce.h"

namespace {

using Clock = std::chrono::steady_clock;

void waitAll(int n, MPI_Request* r) {
  for (int flag = 0;;) {
    MPI_Testall(n, r, &flag, MPI_STATUSES_IGNORE);
    if (flag) return;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

void oneHop(int64_t* buf, int n, int rank, int size) {
  std::vector<int64_t> in(static_cast<size_t>(n) * size);
  std::vector<MPI_Request> r;
  for (int q = 0; q < size; ++q) {
    if (q == rank) continue;
    r.emplace_back();
    MPI_Irecv(in.data() + static_cast<size_t>(q) * n, n, MPI_INT64_T, q, 81, MPI_COMM_WORLD, &r.back());
  }
  for (int s = 1; s < size; ++s) {
    r.emplace_back();
    MPI_Isend(buf, n, MPI_INT64_T, (rank + s) % size, 81, MPI_COMM_WORLD, &r.back());
  }
  waitAll(static_cast<int>(r.size()), r.data());
  for (int q = 0; q < size; ++q)
    if (q != rank)
      for (int i = 0; i < n; ++i) buf[i] &= in[static_cast<size_t>(q) * n + i];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"small allreduce latency: libnbc, recursive doubling, one hop"};
  int words = 4, iters = 50, warmup = 10;
  app.add_option("--words", words, "int64 words of BAND per call")->check(CLI::Range(1, 1024));
  app.add_option("--iters", iters, "timed calls")->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "untimed calls first")->check(CLI::NonNegativeNumber);
  CLI11_PARSE(app, argc, argv);
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  mgs::WaitPolicy wait;
  wait.max_sleep_us = 50;
  std::vector<char> scratch;
  std::vector<int64_t> buf(static_cast<size_t>(words));
  const int64_t mine = ~int64_t{0} ^ (int64_t{1} << (rank % 63));
  int64_t want = ~int64_t{0};
  for (int q = 0; q < size; ++q) want &= ~int64_t{0} ^ (int64_t{1} << (q % 63));
  int wrong = 0;
  for (const char* alg : {"libnbc", "recursive_doubling", "one_hop"}) {
    const std::string a = alg;
    std::vector<double> t;
    for (int it = 0; it < warmup + iters; ++it) {
      std::fill(buf.begin(), buf.end(), mine);
      MPI_Barrier(MPI_COMM_WORLD);
      const auto t0 = Clock::now();
      if (a == "libnbc") {
        MPI_Request r;
        MPI_Iallreduce(MPI_IN_PLACE, buf.data(), words, MPI_INT64_T, MPI_BAND, MPI_COMM_WORLD, &r);
        waitAll(1, &r);
      } else if (a == "recursive_doubling") {
        mgs::Status st = mgs::smallAllreduce(MPI_COMM_WORLD, rank, size, buf.data(), buf.size(), MGS_INT64,
                                             mgs::CommOp::kBitAnd, wait, 80, &scratch);
        if (!st.ok()) std::fprintf(stderr, "[rank %d] %s\n", rank, st.toString().c_str());
      } else {
        oneHop(buf.data(), words, rank, size);
      }
      const double s = std::chrono::duration<double>(Clock::now() - t0).count();
      wrong += buf.front() != want || buf.back() != want;
      if (it >= warmup) t.push_back(s);
    }
    std::sort(t.begin(), t.end());
    double med = t[t.size() / 2], worst = 0;
    MPI_Reduce(&med, &worst, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0)
      std::printf("{\"bench\":\"small_allreduce\",\"algorithm\":\"%s\",\"ranks\":%d,\"bytes\":%d,\"median_ms\":%.3f}\n",
                  alg, size, words * 8, worst * 1e3);
  }
  int wrong_all = 0;
  MPI_Reduce(&wrong, &wrong_all, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank == 0 && wrong_all) std::fprintf(stderr, "%d wrong results\n", wrong_all);
  MPI_Finalize();
  return wrong_all == 0 ? 0 : 1;
}
