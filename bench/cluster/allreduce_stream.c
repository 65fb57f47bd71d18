/* Small allreduces on the emulated cluster (bench/NOTES.md, "The first plan
 * refitted from the profile's own exchanges"). Each figure is the slowest
 * rank's time after a barrier, the median of 7 (9 with "sizes").
 *   (no argument)  4, 16, 48 and 256 KiB per rank: 1, 4 and 16 calls back to
 *                  back, per call (calibration times one alone; a plan whose
 *                  small buckets run dense sends them one after another)
 *   sizes          one call alone at 16 B to 256 KiB, twice over
 *   poll           (with either) MPI_Iallreduce, then test and sleep with a
 *                  doubling pause capped at 100 us, as mgs waits (WaitPolicy),
 *                  instead of the blocking MPI_Allreduce
 *   allgather      (with either) an allgather of that many bytes from every
 *                  rank (MPI_Iallgather with poll), as the sparse exchange
 *                  and calibration's allgather sizes
 * usage: mpicc -O2 -o /tmp/allreduce_stream bench/cluster/allreduce_stream.c
 *        scripts/emulated_cluster.sh -n 32 -r 10gbit -l 0.5ms -- /tmp/allreduce_stream [sizes] [poll]
 * (results/allreduce_stream/: blocking stream_32*.log and sizes_32.log; poll
 * stream_poll_32*.log and sizes_poll_32.log; allgather sizes_allgather_poll_*.log) */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int poll_mode, gather_mode;

static void allreduce(const float* in, float* out, int count) {
  MPI_Request r;
  int flag = 0, pause = 1;
  if (gather_mode) {
    if (!poll_mode) {
      MPI_Allgather(in, count, MPI_FLOAT, out, count, MPI_FLOAT, MPI_COMM_WORLD);
      return;
    }
    MPI_Iallgather(in, count, MPI_FLOAT, out, count, MPI_FLOAT, MPI_COMM_WORLD, &r);
  } else if (!poll_mode) {
    MPI_Allreduce(in, out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    return;
  } else {
    MPI_Iallreduce(in, out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &r);
  }
  for (;;) {
    MPI_Test(&r, &flag, MPI_STATUS_IGNORE);
    if (flag) return;
    usleep(pause);
    pause = pause * 2 > 100 ? 100 : pause * 2;
  }
}

static int cmp(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

static float buf[65536], *out; /* out: 65536 floats from every rank */

/* The median over `reps` of the slowest rank's time of k calls of `bytes`,
 * per call; the least and the most into *lo and *hi. */
static double timed(int bytes, int k, int reps, double* lo, double* hi) {
  double t[9];
  int count = bytes / 4 > 0 ? bytes / 4 : 1;
  for (int r = 0; r < reps; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime(), d, m;
    for (int j = 0; j < k; ++j) allreduce(buf, out, count);
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
  int by_size = 0;
  for (int a = 1; a < argc; ++a) {
    by_size |= strcmp(argv[a], "sizes") == 0;
    poll_mode |= strcmp(argv[a], "poll") == 0;
    gather_mode |= strcmp(argv[a], "allgather") == 0;
  }
  out = calloc((size_t)65536 * size, sizeof *out);
  if (!out) {
    fprintf(stderr, "allreduce_stream: no memory for %d ranks' blocks\n", size);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  if (by_size) {
    const int sizes[] = {16, 1024, 4096, 8192, 16384, 24576, 32768, 40960, 49152, 57344, 65536, 131072, 262144};
    for (int round = 0; round < 2; ++round)
      for (size_t i = 0; i < sizeof sizes / sizeof *sizes; ++i) {
        double lo, hi, t;
        timed(sizes[i], 1, 1, &lo, &hi); /* warm-up */
        t = timed(sizes[i], 1, 9, &lo, &hi);
        if (rank == 0)
          printf("round %d op=%s P=%d bytes=%d median_ms=%.2f min_ms=%.2f max_ms=%.2f\n", round,
                 gather_mode ? "allgather" : "allreduce", size, sizes[i], t * 1e3,
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
  free(out);
  MPI_Finalize();
  return 0;
}
