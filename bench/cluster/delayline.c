/* mgs-delayline: a fixed one-way delay between two network interfaces, in
 * user space, for scripts/emulated_cluster.sh -l.
 *
 * Why: the kernel this project's machines run has no sch_netem (nor fq/etf,
 * which would honour a BPF-set departure time): `tc qdisc add ... netem`
 * answers "Specified qdisc kind is unknown". So each emulated host's link is
 * cut in two and this program sits in the middle:
 *     host netns eth0 <-veth-> A   [mgs-delayline A B DELAY_US]   B <-veth-> bridge port
 * Every frame read from A is written to B DELAY_US later, and the reverse.
 *
 * How: one AF_PACKET socket per side with PACKET_VNET_HDR, so a TSO/GSO frame
 * of up to 64 KiB and its checksum-offload state cross as one frame with its
 * virtio-net header (no need to turn offloads off, fewer frames to copy);
 * PACKET_IGNORE_OUTGOING so a socket does not read back what it wrote. The
 * delay is constant, so each direction is a FIFO whose head is always the
 * next frame due; ppoll() sleeps until then (timer slack set to 1 ns).
 * A full queue drops the frame, as a full switch buffer would (counted and
 * printed at exit). Stops on SIGTERM/SIGINT.
 *
 * Precision: wake-ups on a busy machine come 10-100 us late; the added delay
 * is DELAY_US plus that (scripts/emulated_linktest.sh measures it with ping).
 *
 * usage: mgs-delayline IFACE_A IFACE_B DELAY_US
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifndef PACKET_IGNORE_OUTGOING
#define PACKET_IGNORE_OUTGOING 23
#endif

enum { kSlots = 8192, kFrame = 65536 + 64 };

struct slot {
  uint64_t due_ns;
  uint32_t len;
  char* data;
};
struct queue {
  struct slot s[kSlots];
  unsigned head, count;
  uint64_t frames, drops, send_errors;
};

static volatile sig_atomic_t g_stop = 0;
static void onSignal(int sig) { (void)sig; g_stop = 1; }

static uint64_t nowNs(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static int openSide(const char* ifname) {
  const int fd = socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK, htons(ETH_P_ALL));
  if (fd < 0) { perror("mgs-delayline: socket(AF_PACKET)"); exit(2); }
  const int one = 1, buf = 8 << 20;
  if (setsockopt(fd, SOL_PACKET, PACKET_VNET_HDR, &one, sizeof one) != 0) {
    perror("mgs-delayline: PACKET_VNET_HDR"); exit(2);
  }
  if (setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof one) != 0) {
    perror("mgs-delayline: PACKET_IGNORE_OUTGOING"); exit(2);
  }
  /* Deep socket buffers: the queue, not the socket, should decide drops. */
  (void)setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &buf, sizeof buf);
  (void)setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &buf, sizeof buf);
  struct sockaddr_ll a;
  memset(&a, 0, sizeof a);
  a.sll_family = AF_PACKET;
  a.sll_protocol = htons(ETH_P_ALL);
  a.sll_ifindex = (int)if_nametoindex(ifname);
  if (a.sll_ifindex == 0) { fprintf(stderr, "mgs-delayline: no interface %s\n", ifname); exit(2); }
  if (bind(fd, (struct sockaddr*)&a, sizeof a) != 0) { perror("mgs-delayline: bind"); exit(2); }
  struct packet_mreq m;
  memset(&m, 0, sizeof m);
  m.mr_ifindex = a.sll_ifindex;
  m.mr_type = PACKET_MR_PROMISC;  /* frames for other MACs cross the link too */
  (void)setsockopt(fd, SOL_PACKET, PACKET_ADD_MEMBERSHIP, &m, sizeof m);
  return fd;
}

/* Read every frame waiting on `from` into `q`, due `delay` ns from now. */
static void readAll(int from, struct queue* q, uint64_t delay) {
  for (;;) {
    char* buf = malloc(kFrame);
    if (!buf) return;
    const ssize_t n = recv(from, buf, kFrame, 0);
    if (n <= 0) { free(buf); return; }
    if (q->count == kSlots) { free(buf); ++q->drops; continue; }
    struct slot* s = &q->s[(q->head + q->count) % kSlots];
    s->due_ns = nowNs() + delay;
    s->len = (uint32_t)n;
    s->data = buf;
    ++q->count;
  }
}

/* Write the frames of `q` that are due to `to`; returns ns until the next one. */
static int64_t sendDue(int to, struct queue* q) {
  while (q->count) {
    struct slot* s = &q->s[q->head];
    const uint64_t now = nowNs();
    if (s->due_ns > now) return (int64_t)(s->due_ns - now);
    if (send(to, s->data, s->len, 0) < 0) ++q->send_errors;
    ++q->frames;
    free(s->data);
    q->head = (q->head + 1) % kSlots;
    --q->count;
  }
  return -1;
}

int main(int argc, char** argv) {
  if (argc != 4) { fprintf(stderr, "usage: %s IFACE_A IFACE_B DELAY_US\n", argv[0]); return 2; }
  const uint64_t delay = (uint64_t)(atof(argv[3]) * 1000.0);
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  signal(SIGTERM, onSignal);
  signal(SIGINT, onSignal);
  struct pollfd p[2] = {{openSide(argv[1]), POLLIN, 0}, {openSide(argv[2]), POLLIN, 0}};
  static struct queue ab, ba; /* A -> B and B -> A */
  while (!g_stop) {
    const int64_t w1 = sendDue(p[1].fd, &ab), w2 = sendDue(p[0].fd, &ba);
    int64_t wait = w1 < 0 ? w2 : (w2 < 0 ? w1 : (w1 < w2 ? w1 : w2));
    struct timespec ts = {wait / 1000000000, wait % 1000000000};
    const int r = ppoll(p, 2, wait < 0 ? NULL : &ts, NULL);
    if (r < 0 && errno != EINTR) { perror("mgs-delayline: ppoll"); return 1; }
    if (p[0].revents & POLLIN) readAll(p[0].fd, &ab, delay);
    if (p[1].revents & POLLIN) readAll(p[1].fd, &ba, delay);
  }
  fprintf(stderr, "mgs-delayline %s<->%s: %llu+%llu frames, %llu+%llu dropped (queue full), %llu+%llu send errors\n",
          argv[1], argv[2], (unsigned long long)ab.frames, (unsigned long long)ba.frames,
          (unsigned long long)ab.drops, (unsigned long long)ba.drops, (unsigned long long)ab.send_errors,
          (unsigned long long)ba.send_errors);
  return 0;
}
