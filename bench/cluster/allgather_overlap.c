/* How far small nonblocking allgathers in flight together overlap, measured
 * three ways (bench/NOTES.md, "Exchanges in flight as the job's allgathers
 * showed"): the calibration's way (one, then four started together, each a
 * warm-up and the median of 5 back to back, the slowest rank's), and with a
 * barrier before each of: one, four together, and 12 started through a
 * window of 4 (the pipeline's BlockExchange::kMaxInFlight: the oldest is
 * waited for before a fifth starts). Waits test and sleep with a doubling
 * pause capped at 100 us, as mgs's WaitPolicy does. 4 KiB per rank.
 * Overlap: (4 x one - four) / (3 x one); the window's: 1 - spacing / one.
 * usage: mpicc -O2 -o /tmp/allgather_overlap bench/cluster/allgather_overlap.c
 *        scripts/emulated_cluster.sh -n 16 -r 10gbit -l 0.5ms -- /tmp/allgather_overlap */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
static void waitreq(MPI_Request* r) {
  int flag = 0, sl = 1;
  for (;;) {
    MPI_Test(r, &flag, MPI_STATUS_IGNORE);
    if (flag) return;
    usleep(sl);
    sl = sl * 2 > 100 ? 100 : sl * 2;
  }
}
#define B 4096

static int cmpd(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}
/* k allgathers started together, then waited for in order (k <= 16). */
static void together(int k, char* send, char* recv, int P) {
  MPI_Request req[16];
  for (int j = 0; j < k; ++j)
    MPI_Iallgather(send, B, MPI_BYTE, recv + (size_t)j * B * P, B, MPI_BYTE, MPI_COMM_WORLD, &req[j]);
  for (int j = 0; j < k; ++j) waitreq(&req[j]);
}
static double med5(int k, char* send, char* recv, int P) {
  double t[5];
  together(k, send, recv, P);
  for (int i = 0; i < 5; ++i) {
    double t0 = MPI_Wtime();
    together(k, send, recv, P);
    t[i] = MPI_Wtime() - t0;
  }
  qsort(t, 5, sizeof(double), cmpd);
  return t[2];
}
int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int P, rank;
  MPI_Comm_size(MPI_COMM_WORLD, &P);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  char* send = calloc(B, 1);
  char* recv = calloc((size_t)B * P * 16, 1);
  MPI_Request req[16];

  for (int rep = 0; rep < 8; ++rep) {
    double t[2] = {med5(1, send, recv, P), med5(4, send, recv, P)}, m[2];
    MPI_Allreduce(t, m, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0)
      printf("cal-like P=%d one %.2f four %.2f ov %.2f\n", P, m[0] * 1e3, m[1] * 1e3, (4 * m[0] - m[1]) / (3 * m[0]));
  }
  int N = 12;
  for (int rep = 0; rep < 7; ++rep) {
    double t[3];
    for (int mode = 0; mode < 3; ++mode) {
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = MPI_Wtime();
      if (mode < 2) {
        together(mode == 0 ? 1 : 4, send, recv, P);
      } else {
        int head = 0;
        for (int j = 0; j < N; ++j) {
          if (j - head >= 4) {
            waitreq(&req[head % 16]);
            ++head;
          }
          MPI_Iallgather(send, B, MPI_BYTE, recv + (size_t)(j % 16) * B * P, B, MPI_BYTE, MPI_COMM_WORLD, &req[j % 16]);
        }
        for (; head < N; ++head) waitreq(&req[head % 16]);
      }
      t[mode] = MPI_Wtime() - t0;
    }
    double m[3];
    MPI_Reduce(t, m, 3, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) {
      double one = m[0];
      printf("P=%d one %.2f ms  four %.2f ms (ov %.2f)  %d-window4 %.2f ms (spacing %.2f ms, ov %.2f)\n", P, one * 1e3,
             m[1] * 1e3, (4 * one - m[1]) / (3 * one), N, m[2] * 1e3, (m[2] - one) / (N - 1) * 1e3,
             1 - (m[2] - one) / (N - 1) / one);
    }
  }
  MPI_Finalize();
  return 0;
}
