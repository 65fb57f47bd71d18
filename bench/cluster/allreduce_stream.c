/* Small blocking allreduces on the emulated cluster (bench/NOTES.md, "The
 * first plan refitted from the profile's own exchanges"). Each figure is the
 * slowest rank's time after a barrier, the median of 7 (9 with "sizes").
 *   (no argument)  4, 16, 48 and 256 KiB per rank: 1, 4 and 16 calls back to
 *                  back, per call (calibration times one alone; a plan whose
 *                  small buckets run dense sends them one after another)
 *   sizes          one call alone at 16 B to 256 KiB, twice over
 * usage: mpicc -O2 -o /tmp/allreduce_stream bench/cluster/allreduce_stream.c
 *        scripts/emulated_cluster.sh -n 32 -r 10gbit -l 0.5ms -- /tmp/allreduce_stream [sizes]
 * (results/allreduce_stream/stream_32.log and sizes_32.log) */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

static float buf[65536], out[65536];

/* The median over `reps` of the slowest rank's time of k calls of `bytes`,
 * per call; the least and the most into *lo and *hi. */
static double timed(int bytes, int k, int reps, double* lo, double* hi) {
  double t[9];
  int count = bytes / 4 > 0 ? bytes / 4 : 1;
  for (int r = 0; r < reps; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime(), d, m;
    for (int j = 0; j < k; ++j) MPI_Allreduce(buf, out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    d = MPI_Wtime() - t0;
    MPI_Allreduce(&d, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    t[r] = m / k;
  }
  qsort(t, reps, sizeof *t, cmp);
  *lo = t[0];
  *hi = t[reps - 1];
  return t[reps / 2];
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (argc > 1 && strcmp(argv[1], "sizes") == 0) {
    const int sizes[] = {16, 1024, 4096, 8192, 16384, 24576, 32768, 40960, 49152, 57344, 65536, 131072, 262144};
    for (int round = 0; round < 2; ++round)
      for (size_t i = 0; i < sizeof sizes / sizeof *sizes; ++i) {
        double lo, hi, t;
        timed(sizes[i], 1, 1, &lo, &hi); /* warm-up */
        t = timed(sizes[i], 1, 9, &lo, &hi);
        if (rank == 0)
          printf("round %d P=%d bytes=%d median_ms=%.2f min_ms=%.2f max_ms=%.2f\n", round, size, sizes[i], t * 1e3,
                 lo * 1e3, hi * 1e3);
        fflush(stdout);
      }
  } else {
    const int sizes[] = {4096, 16384, 49152, 262144};
    for (int round = 0; round < 2; ++round)
      for (int i = 0; i < 4; ++i)
        for (int k = 1; k <= 16; k *= 4) {
          double lo, hi, t = timed(sizes[i], k, 7, &lo, &hi);
          if (rank == 0)
            printf("round %d P=%d bytes=%d back_to_back=%d per_call_median_ms=%.2f\n", round, size, sizes[i], k,
                   t * 1e3);
          fflush(stdout);
        }
  }
  MPI_Finalize();
  return 0;
}
