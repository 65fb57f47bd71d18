/* The allreduce sizes sweep behind sizes_32.log: 9 calls alone per size, the slowest rank each, median.
 * usage as ../../allreduce_stream.c, with this file. */
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
  const int sizes[] = {16, 1024, 4096, 8192, 16384, 24576, 32768, 40960, 49152, 57344, 65536, 131072, 262144};
  const int n = sizeof sizes / sizeof *sizes, reps = 9;
  float* buf = calloc(65536, 4);
  float* out = calloc(65536, 4);
  for (int round = 0; round < 2; ++round)
    for (int i = 0; i < n; ++i) {
      double t[9];
      int count = sizes[i] / 4;
      if (count < 1) count = 1;
      MPI_Allreduce(buf, out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      for (int r = 0; r < reps; ++r) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        MPI_Allreduce(buf, out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        double d = MPI_Wtime() - t0, m;
        MPI_Allreduce(&d, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        t[r] = m;
      }
      qsort(t, reps, sizeof *t, cmp);
      if (rank == 0)
        printf("round %d P=%d bytes=%d median_ms=%.2f min_ms=%.2f max_ms=%.2f\n", round, size, sizes[i],
               t[reps / 2] * 1e3, t[0] * 1e3, t[reps - 1] * 1e3);
      fflush(stdout);
    }
  MPI_Finalize();
  return 0;
}
