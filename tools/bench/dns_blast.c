/* dns_blast: a paced UDP DNS query generator for the tracer benchmarks (tools/bench/bpf-cost.sh).
 * dnsperf keeps a bounded number of queries in flight and waits for answers, so on two shared vCPUs
 * it tops out where the server does (~40k queries/s here). This sends A queries at a fixed rate
 * whatever the server manages, in batches of sendmmsg(), and counts the answers it gets back, so
 * the tracer's tc programs see the offered rate even when dnsmasq falls behind.
 *
 *   dns_blast SERVER_IPV4 QUERIES_PER_SECOND SECONDS [SOCKETS [NETNS_FILE...]]
 *
 * With network namespace files (/run/netns/NAME), SOCKETS sockets are opened in each of them and
 * the rate is spread evenly over all: one process offers load from many guests at once
 * (tools/bench/density.sh). Prints one JSON line: {"sent":N,"answered":N,"seconds":S,
 * "sent_per_s":R,"netns":K,"answered_min":A} (answered_min: the fewest answers any one netns
 * got). Build:
 *   cc -O2 -Wall -o dns_blast tools/bench/dns_blast.c */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BATCH 32
#define MAX_SOCKS 4096
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

/* Opens a connected query socket in the netns of `netns` (NULL: ours) and adds it to the epoll
 * set; returns the fd or -1 with a message. */
static int open_query_socket(const struct sockaddr_in* dst, const char* netns, int home, int ep,
                             int index) {
  if (netns != NULL) {
    int nfd = open(netns, O_RDONLY | O_CLOEXEC);
    if (nfd < 0 || setns(nfd, CLONE_NEWNET) != 0) {
      fprintf(stderr, "failed to enter netns %s: %s\n", netns, strerror(errno));
      return -1;
    }
    close(nfd);
  }
  /* A socket stays in the netns it was made in after we leave it. */
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
  int big = 4 << 20;
  if (fd < 0 || connect(fd, (const struct sockaddr*)dst, sizeof *dst) != 0) {
    fprintf(stderr, "failed to open query socket: %s\n", strerror(errno));
    return -1;
  }
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
  struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)index};
  if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0 ||
      (netns != NULL && setns(home, CLONE_NEWNET) != 0)) {
    fprintf(stderr, "failed to set up query socket: %s\n", strerror(errno));
    return -1;
  }
  return fd;
}

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s SERVER_IPV4 QUERIES_PER_SECOND SECONDS [SOCKETS [NETNS_FILE...]]\n",
            argv[0]);
    return 2;
  }
  struct sockaddr_in dst = {.sin_family = AF_INET, .sin_port = htons(53)};
  if (inet_pton(AF_INET, argv[1], &dst.sin_addr) != 1) {
    fprintf(stderr, "failed to parse server address: %s\n", argv[1]);
    return 2;
  }
  const double rate = atof(argv[2]), secs = atof(argv[3]);
  const int per = argc > 4 ? atoi(argv[4]) : 4;
  const int nns = argc > 5 ? argc - 5 : 1;
  const int nsock = per * nns;
  if (rate <= 0 || secs <= 0 || per < 1 || nsock > MAX_SOCKS) {
    fprintf(stderr,
            "failed to parse arguments: rate and seconds must be > 0, at least 1 socket, at most "
            "%d in all\n",
            MAX_SOCKS);
    return 2;
  }
  static int fds[MAX_SOCKS];
  static long answers[MAX_SOCKS];
  const int home = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  const int ep = epoll_create1(EPOLL_CLOEXEC);
  if (home < 0 || ep < 0) {
    fprintf(stderr, "failed to open own netns or epoll: %s\n", strerror(errno));
    return 1;
  }
  for (int i = 0; i < nsock; i++) {
    fds[i] = open_query_socket(&dst, argc > 5 ? argv[5 + i / per] : NULL, home, ep, i);
    if (fds[i] < 0) return 1;
  }

  static uint8_t pkts[BATCH][64];
  struct mmsghdr msgs[BATCH];
  struct iovec iov[BATCH];
  struct epoll_event ready[64];
  long sent = 0;
  uint16_t id = 1;
  const double t0 = now(), end = t0 + secs;
  double t;
  int s = 0;

  while ((t = now()) < end) {
    long due = (long)((t - t0) * rate) - sent;
    if (due <= 0) {
      int n = epoll_wait(ep, ready, 64, 0);
      for (int i = 0; i < n; i++) answers[ready[i].data.u32] += drain(fds[ready[i].data.u32]);
      struct timespec nap = {0, 50000}; /* 50 µs: fine pacing without a busy loop */
      nanosleep(&nap, NULL);
      continue;
    }
    /* Small batches when many sockets share the rate, so every one of them sends steadily. */
    int n = due < BATCH ? (int)due : BATCH;
    if (nsock > 4 && n > 4) n = 4;
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
    answers[s] += drain(fds[s]);
    s = (s + 1) % nsock;
  }
  /* Answers still on their way. */
  const double grace = now() + 0.2;
  while (now() < grace) {
    for (int i = 0; i < nsock; i++) answers[i] += drain(fds[i]);
    usleep(10000);
  }
  double el = now() - t0 - 0.2;
  long answered = 0, min_ns = -1;
  for (int k = 0; k < nns; k++) {
    long a = 0;
    for (int i = k * per; i < (k + 1) * per; i++) a += answers[i];
    answered += a;
    if (min_ns < 0 || a < min_ns) min_ns = a;
  }
  printf(
      "{\"sent\":%ld,\"answered\":%ld,\"seconds\":%.2f,\"sent_per_s\":%.0f,\"netns\":%d,"
      "\"answered_min\":%ld}\n",
      sent, answered, el, sent / el, argc > 5 ? nns : 0, min_ns);
  return 0;
}
