/* dns_blast: a paced UDP DNS query generator for the tracer benchmarks (tools/bench/bpf-cost.sh).
 * dnsperf keeps a bounded number of queries in flight and waits for answers, so on two shared vCPUs
 * it tops out where the server does (~40k queries/s here). This sends A queries at a fixed rate
 * whatever the server manages, in batches of sendmmsg(), and counts the answers it gets back, so
 * the tracer's tc programs see the offered rate even when dnsmasq falls behind.
 *
 *   dns_blast SERVER_IPV4 QUERIES_PER_SECOND SECONDS [SOCKETS]
 *
 * Prints one JSON line: {"sent":N,"answered":N,"seconds":S,"sent_per_s":R}. Build:
 *   cc -O2 -Wall -o dns_blast tools/bench/dns_blast.c */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BATCH 32
#define MAX_SOCKS 16
#define NAMES 50

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* qNN.bench.test A, RD set, id = seq. */
static size_t build_query(uint8_t* b, uint16_t id, int name) {
  char label[8];
  size_t n = 0;
  int ll = snprintf(label, sizeof label, "q%d", name + 1);

  b[n++] = id >> 8;
  b[n++] = id & 0xFF;
  b[n++] = 0x01; /* RD */
  b[n++] = 0x00;
  b[n++] = 0;
  b[n++] = 1; /* QDCOUNT */
  memset(b + n, 0, 6);
  n += 6;
  b[n++] = (uint8_t)ll;
  memcpy(b + n, label, (size_t)ll);
  n += (size_t)ll;
  b[n++] = 5;
  memcpy(b + n, "bench", 5);
  n += 5;
  b[n++] = 4;
  memcpy(b + n, "test", 4);
  n += 4;
  b[n++] = 0;
  b[n++] = 0;
  b[n++] = 1; /* A */
  b[n++] = 0;
  b[n++] = 1; /* IN */
  return n;
}

static long drain(int fd) {
  static uint8_t bufs[BATCH][512];
  struct mmsghdr msgs[BATCH];
  struct iovec iov[BATCH];
  long got = 0;

  for (;;) {
    for (int i = 0; i < BATCH; i++) {
      iov[i].iov_base = bufs[i];
      iov[i].iov_len = sizeof bufs[i];
      memset(&msgs[i], 0, sizeof msgs[i]);
      msgs[i].msg_hdr.msg_iov = &iov[i];
      msgs[i].msg_hdr.msg_iovlen = 1;
    }
    int r = recvmmsg(fd, msgs, BATCH, MSG_DONTWAIT, NULL);
    if (r <= 0) return got;
    got += r;
  }
}

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s SERVER_IPV4 QUERIES_PER_SECOND SECONDS [SOCKETS]\n", argv[0]);
    return 2;
  }
  struct sockaddr_in dst = {.sin_family = AF_INET, .sin_port = htons(53)};
  if (inet_pton(AF_INET, argv[1], &dst.sin_addr) != 1) {
    fprintf(stderr, "failed to parse server address: %s\n", argv[1]);
    return 2;
  }
  const double rate = atof(argv[2]), secs = atof(argv[3]);
  int nsock = argc > 4 ? atoi(argv[4]) : 4;
  if (rate <= 0 || secs <= 0 || nsock < 1 || nsock > MAX_SOCKS) {
    fprintf(stderr, "failed to parse arguments: rate and seconds must be > 0, 1-%d sockets\n",
            MAX_SOCKS);
    return 2;
  }
  int fds[MAX_SOCKS];
  for (int i = 0; i < nsock; i++) {
    fds[i] = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
    int big = 4 << 20;
    if (fds[i] < 0 || connect(fds[i], (struct sockaddr*)&dst, sizeof dst) != 0) {
      fprintf(stderr, "failed to open query socket: %s\n", strerror(errno));
      return 1;
    }
    setsockopt(fds[i], SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
  }

  static uint8_t pkts[BATCH][64];
  struct mmsghdr msgs[BATCH];
  struct iovec iov[BATCH];
  long sent = 0, answered = 0;
  uint16_t id = 1;
  const double t0 = now(), end = t0 + secs;
  double t;
  int s = 0;

  while ((t = now()) < end) {
    long due = (long)((t - t0) * rate) - sent;
    if (due <= 0) {
      for (int i = 0; i < nsock; i++) answered += drain(fds[i]);
      struct timespec nap = {0, 50000}; /* 50 µs: fine pacing without a busy loop */
      nanosleep(&nap, NULL);
      continue;
    }
    int n = due < BATCH ? (int)due : BATCH;
    for (int i = 0; i < n; i++) {
      iov[i].iov_base = pkts[i];
      iov[i].iov_len = build_query(pkts[i], id++, (int)((sent + i) % NAMES));
      memset(&msgs[i], 0, sizeof msgs[i]);
      msgs[i].msg_hdr.msg_iov = &iov[i];
      msgs[i].msg_hdr.msg_iovlen = 1;
    }
    int r = sendmmsg(fds[s], msgs, (unsigned)n, 0);
    if (r > 0)
      sent += r;
    else if (errno != EAGAIN && errno != ENOBUFS) {
      fprintf(stderr, "failed to send queries: %s\n", strerror(errno));
      return 1;
    }
    answered += drain(fds[s]);
    s = (s + 1) % nsock;
  }
  /* Answers still on their way. */
  const double grace = now() + 0.2;
  while (now() < grace) {
    for (int i = 0; i < nsock; i++) answered += drain(fds[i]);
    usleep(10000);
  }
  double el = now() - t0 - 0.2;
  printf("{\"sent\":%ld,\"answered\":%ld,\"seconds\":%.2f,\"sent_per_s\":%.0f}\n", sent, answered,
         el, sent / el);
  return 0;
}
