/* Small blocking allreduces on the emulated cluster, alone and back to back
 * (bench/NOTES.md, "The first plan refitted from the profile's own
 * exchanges"): for each size (bytes per rank), 1, 4 and 16 MPI_Allreduce
 * calls after a barrier, the slowest rank's time over the calls, median of
 * 7, per call. Calibration times the first (the median of 9 alone); a plan
 * whose small buckets run dense sends the others.
 * usage: mpicc -O2 -o /tmp/allreduce_stream bench/cluster/allreduce_stream.c
 *        scripts/emulated_cluster.sh -n 32 -r 10gbit -l 0.5ms -- /tmp/allreduce_stream */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
static int cmp(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}
int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int sizes[] = {4096, 16384, 49152, 262144};
  float* buf = calloc(65536, 4);
  float* out = calloc(65536, 4);
  for (int round = 0; round < 2; ++round)
    for (int i = 0; i < 4; ++i) {
      int count = sizes[i] / 4;
      for (int k = 1; k <= 16; k *= 4) {
        double t[7];
        for (int r = 0; r < 7; ++r) {
          MPI_Barrier(MPI_COMM_WORLD);
          double t0 = MPI_Wtime();
          for (int j = 0; j < k; ++j) MPI_Allreduce(buf, out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
          double d = MPI_Wtime() - t0, m;
          MPI_Allreduce(&d, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
          t[r] = m / k;
        }
        qsort(t, 7, sizeof *t, cmp);
        if (rank == 0)
          printf("round %d P=%d bytes=%d back_to_back=%d per_call_median_ms=%.2f\n", round, size, sizes[i], k,
                 t[3] * 1e3);
        fflush(stdout);
      }
    }
  MPI_Finalize();
  return 0;
}
