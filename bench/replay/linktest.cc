// mgs-linktest: checks what a link really carries (used by
// scripts/emulated_cluster.sh to verify the tc rate limit).
//  - one-way stream rank 0 -> rank 1 (bandwidth of one link direction),
//  - ping-pong of 8 bytes (latency),
//  - MPI_Allreduce of a large float buffer over all ranks (what dense
//    data-parallel training does), compared with the ring bound
//    2 (P-1)/P * bytes / link rate.
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <vector>

int main(int argc, char** argv) {
  CLI::App app{"MPI link check: stream bandwidth, ping-pong latency, large allreduce"};
  double mib = 64, rate_gbit = 1;
  int reps = 3;
  app.add_option("--mib", mib, "message / allreduce size in MiB")->capture_default_str();
  app.add_option("--reps", reps, "repetitions (median reported)")->capture_default_str();
  app.add_option("--rate-gbit", rate_gbit, "expected link rate, for the ratio column")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  char host[MPI_MAX_PROCESSOR_NAME];
  int len = 0;
  MPI_Get_processor_name(host, &len);
  const size_t bytes = static_cast<size_t>(mib * (1 << 20));
  std::vector<char> buf(bytes, 1);
  auto med = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double rate = rate_gbit * 1e9 / 8;
  if (size >= 2) {
    std::vector<double> t;
    for (int r = 0; r < reps + 1; ++r) {
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = MPI_Wtime();
      if (rank == 0) {
        MPI_Send(buf.data(), static_cast<int>(bytes), MPI_BYTE, 1, 0, MPI_COMM_WORLD);
        MPI_Recv(buf.data(), 1, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      } else if (rank == 1) {
        MPI_Recv(buf.data(), static_cast<int>(bytes), MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(buf.data(), 1, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
      }
      if (r) t.push_back(MPI_Wtime() - t0);
    }
    std::vector<double> lat;
    for (int r = 0; r < 200; ++r) {
      const double t0 = MPI_Wtime();
      if (rank == 0) {
        MPI_Send(buf.data(), 8, MPI_BYTE, 1, 2, MPI_COMM_WORLD);
        MPI_Recv(buf.data(), 8, MPI_BYTE, 1, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      } else if (rank == 1) {
        MPI_Recv(buf.data(), 8, MPI_BYTE, 0, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(buf.data(), 8, MPI_BYTE, 0, 3, MPI_COMM_WORLD);
      }
      lat.push_back((MPI_Wtime() - t0) / 2);
    }
    if (rank == 0) {
      const double s = med(t);
      std::printf(
          "{\"test\":\"stream\",\"host0\":\"%s\",\"bytes\":%zu,\"median_s\":%.6f,\"gbit_per_s\":%.4f,"
          "\"of_rate\":%.3f}\n",
          host, bytes, s, bytes * 8 / s / 1e9, bytes / s / rate);
      std::printf("{\"test\":\"pingpong\",\"bytes\":8,\"median_one_way_us\":%.1f}\n", med(lat) * 1e6);
    }
  }
  {
    std::vector<float> x(bytes / 4, 1.0f);
    std::vector<double> t;
    for (int r = 0; r < reps + 1; ++r) {
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = MPI_Wtime();
      MPI_Allreduce(MPI_IN_PLACE, x.data(), static_cast<int>(x.size()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      double dt = MPI_Wtime() - t0;
      MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      if (r) t.push_back(dt);
    }
    if (rank == 0) {
      const double s = med(t), ring = size > 1 ? 2.0 * (size - 1) / size * bytes / rate : 0;
      std::printf(
          "{\"test\":\"allreduce\",\"ranks\":%d,\"bytes\":%zu,\"median_s\":%.6f,\"ring_bound_s\":%.6f,"
          "\"bound_over_measured\":%.3f}\n",
          size, bytes, s, ring, s > 0 ? ring / s : 0);
    }
  }
  MPI_Finalize();
  return 0;
}
