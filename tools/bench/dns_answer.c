/* dns_answer: a minimal UDP DNS responder for the density benchmark (tools/bench/density.sh).
 * dnsmasq answers one query per recvmsg/sendmsg and logs; on two shared vCPUs it fell behind
 * dns_blast at ~10-15k queries/s, so the tracer never saw the offered rate as answers. This one
 * answers every well-formed query with one A record (10.1.2.3, TTL 30), in batches of recvmmsg()
 * and sendmmsg(), on THREADS sockets bound with SO_REUSEPORT (the kernel spreads the flows over
 * them). Real packets still cross the real path: it runs where dnsmasq did, in the CoreDNS
 * stand-in's netns behind the ClusterIP translation.
 *
 *   dns_answer LISTEN_IPV4 [PORT [THREADS]]
 *
 * Runs until SIGTERM or SIGINT, then prints one JSON line to stdout:
 * {"received":N,"answered":N,"malformed":N,"send_failed":N}. Build:
 *   cc -O2 -Wall -pthread -o dns_answer tools/bench/dns_answer.c */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#define BATCH 64
#define BUF 512
#define MAX_THREADS 8

static volatile sig_atomic_t stop;
static atomic_long received, answered, malformed, send_failed;
static struct sockaddr_in listen_addr;

static void on_signal(int sig) {
  (void)sig;
  stop = 1;
}

/* Turns the query in b[0..n) into an answer in place; returns the answer's length, 0 when the
 * query is not one this answers (short, a response already, not exactly one question). */
static size_t answer(uint8_t* b, size_t n) {
  static const uint8_t rr[] = {0xC0, 0x0C,         /* the question's name */
                               0,    1,    0,  1,  /* A IN */
                               0,    0,    0,  30, /* TTL */
                               0,    4,    10, 1,  2, 3};
  if (n < 12 || (b[2] & 0x80) || b[4] != 0 || b[5] != 1) return 0;
  size_t p = 12;
  while (p < n && b[p] != 0) {
    if (b[p] & 0xC0) return 0; /* no compression in a question */
    p += 1 + b[p];
  }
  p += 1 + 4; /* the root label, QTYPE, QCLASS */
  if (p > n || p + sizeof rr > BUF) return 0;
  b[2] = (uint8_t)(0x80 | (b[2] & 0x79)); /* QR, the opcode and RD kept */
  b[3] = 0x80;                            /* RA, NOERROR */
  b[6] = 0, b[7] = 1;                     /* ANCOUNT 1 */
  memset(b + 8, 0, 4);                    /* no authority or additional records */
  memcpy(b + p, rr, sizeof rr);
  return p + sizeof rr;
}

static void* serve(void* arg) {
  (void)arg;
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  int one = 1, big = 8 << 20;
  struct timeval tick = {0, 100000}; /* wakes to see a stop */
  if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) != 0 ||
      bind(fd, (struct sockaddr*)&listen_addr, sizeof listen_addr) != 0) {
    fprintf(stderr, "failed to bind %s:%d: %s\n", inet_ntoa(listen_addr.sin_addr),
            ntohs(listen_addr.sin_port), strerror(errno));
    exit(1);
  }
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tick, sizeof tick);
  static __thread uint8_t bufs[BATCH][BUF];
  struct sockaddr_in peers[BATCH];
  struct iovec iov[BATCH];
  struct mmsghdr in[BATCH], out[BATCH];
  while (!stop) {
    for (int i = 0; i < BATCH; i++) {
      iov[i].iov_base = bufs[i];
      iov[i].iov_len = BUF;
      memset(&in[i], 0, sizeof in[i]);
      in[i].msg_hdr.msg_iov = &iov[i];
      in[i].msg_hdr.msg_iovlen = 1;
      in[i].msg_hdr.msg_name = &peers[i];
      in[i].msg_hdr.msg_namelen = sizeof peers[i];
    }
    int r = recvmmsg(fd, in, BATCH, MSG_WAITFORONE, NULL);
    if (r <= 0) continue; /* the tick, or EINTR */
    received += r;
    int k = 0;
    for (int i = 0; i < r; i++) {
      size_t len = answer(bufs[i], in[i].msg_len);
      if (len == 0) {
        malformed++;
        continue;
      }
      iov[i].iov_len = len;
      out[k].msg_hdr = in[i].msg_hdr;
      out[k].msg_hdr.msg_iov = &iov[i];
      out[k].msg_len = 0;
      k++;
    }
    for (int done = 0; done < k;) {
      int s = sendmmsg(fd, out + done, (unsigned)(k - done), 0);
      if (s <= 0) {
        send_failed += k - done;
        break;
      }
      done += s;
      answered += s;
    }
  }
  close(fd);
  return NULL;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s LISTEN_IPV4 [PORT [THREADS]]\n", argv[0]);
    return 2;
  }
  listen_addr.sin_family = AF_INET;
  listen_addr.sin_port = htons(argc > 2 ? (uint16_t)atoi(argv[2]) : 53);
  const int threads = argc > 3 ? atoi(argv[3]) : 2;
  if (inet_pton(AF_INET, argv[1], &listen_addr.sin_addr) != 1 || threads < 1 ||
      threads > MAX_THREADS) {
    fprintf(stderr, "failed to parse arguments: an IPv4 address, 1-%d threads\n", MAX_THREADS);
    return 2;
  }
  struct sigaction sa = {.sa_handler = on_signal};
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  pthread_t t[MAX_THREADS];
  for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, serve, NULL);
  for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
  printf("{\"received\":%ld,\"answered\":%ld,\"malformed\":%ld,\"send_failed\":%ld}\n",
         (long)received, (long)answered, (long)malformed, (long)send_failed);
  return 0;
}
