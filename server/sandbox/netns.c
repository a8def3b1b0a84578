/* netns.c: network namespaces the engine's caller owns, for
 * spec.netns_fd (sandbox.h): only lo, brought up, and optionally one TCP
 * socket listening on 127.0.0.1 inside it.
 *
 * Namespaces are per thread, and the server has threads by the time it
 * wants one. So the work is done by a short-lived thread of its own: it
 * unshares a new network namespace, sets it up, hands back the descriptors
 * and exits. No other thread ever changes namespace, and the helper cannot
 * be left in the wrong one, since it ends. A socket stays in the namespace
 * it was created in, so the caller can serve the listener from the host's
 * namespace. Must never bring up anything but lo: the namespace has no
 * route out, which is its point. */
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cleanup.h"
#include "sandbox.h"

struct netns_job {
  uint16_t port;
  bool want_listener;
  int ns_fd;     /* out */
  int listen_fd; /* out */
  struct sandbox_error err;
};

/* Up, lo gets 127.0.0.1 and ::1; down (as the kernel makes it), nothing on
 * it is reachable. */
static int loopback_up(struct sandbox_error *err) {
  cleanup_close int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0)
    return sandbox_error_set(err, errno, "socket for lo");
  struct ifreq ifr;
  memset(&ifr, 0, sizeof ifr);
  snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "lo");
  if (ioctl(s, SIOCGIFFLAGS, &ifr) < 0)
    return sandbox_error_set(err, errno, "flags of lo");
  ifr.ifr_flags |= IFF_UP;
  if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0)
    return sandbox_error_set(err, errno, "bring lo up");
  return 0;
}

static int listen_loopback(uint16_t port, struct sandbox_error *err) {
  cleanup_close int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0)
    return sandbox_error_set(err, errno, "listening socket");
  struct sockaddr_in sa = {
      .sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0)
    return sandbox_error_set(err, errno, "bind 127.0.0.1:%u", (unsigned)port);
  if (listen(fd, 64) < 0)
    return sandbox_error_set(err, errno, "listen on 127.0.0.1:%u", (unsigned)port);
  return steal_fd(&fd);
}

static void *netns_thread(void *arg) {
  struct netns_job *job = arg;
  if (unshare(CLONE_NEWNET) < 0) {
    sandbox_error_set(&job->err, errno, "create a network namespace");
    return NULL;
  }
  cleanup_close int ns = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  if (ns < 0) {
    sandbox_error_set(&job->err, errno, "open the new network namespace");
    return NULL;
  }
  if (loopback_up(&job->err) < 0)
    return NULL;
  if (job->want_listener && (job->listen_fd = listen_loopback(job->port, &job->err)) < 0)
    return NULL;
  job->ns_fd = steal_fd(&ns);
  return NULL; /* the thread ends here, in the new namespace: nothing to undo */
}

int sandbox_netns_create(uint16_t port, int *listen_fd, struct sandbox_error *err) {
  struct netns_job job = {
      .port = port, .want_listener = listen_fd != NULL, .ns_fd = -1, .listen_fd = -1};
  pthread_t th;
  int rc = pthread_create(&th, NULL, netns_thread, &job);
  if (rc != 0)
    return sandbox_error_set(err, rc, "thread for a network namespace");
  pthread_join(th, NULL);
  if (job.ns_fd < 0) {
    if (job.listen_fd >= 0)
      close(job.listen_fd);
    if (err != NULL)
      *err = job.err;
    return -1;
  }
  if (listen_fd != NULL)
    *listen_fd = job.listen_fd;
  return job.ns_fd;
}
