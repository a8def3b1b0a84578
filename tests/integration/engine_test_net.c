/* engine_test_net.c: the network of a run. By default none: only lo in a
 * namespace of its own, and every socket family but AF_UNIX refused. The
 * network profile (the package installer's) runs in the namespace its
 * caller made, never in the host's: without one it is refused. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine_test_common.h"

static void test_network_connect_is_permission_error(void **state) {
  expect_py_stdout("import socket\n"
                   "for fam, typ in [(socket.AF_INET, socket.SOCK_STREAM), (socket.AF_INET6, "
                   "socket.SOCK_DGRAM),\n"
                   "                 (socket.AF_PACKET, socket.SOCK_RAW), (socket.AF_NETLINK, "
                   "socket.SOCK_RAW)]:\n"
                   "    try:\n"
                   "        socket.socket(fam, typ).connect(('127.0.0.1', 7878))\n"
                   "        print('connected')\n"
                   "    except PermissionError:\n"
                   "        print('blocked')\n"
                   "socket.socket(socket.AF_UNIX).close(); print('unix ok')\n",
                   NULL, "blocked\nblocked\nblocked\nblocked\nunix ok\n");
}

static void test_network_namespace_has_only_lo(void **state) {
  expect_py_stdout("lines = open('/proc/net/dev').read().splitlines()[2:]\n"
                   "print(','.join(sorted(l.split(':')[0].strip() for l in lines)))\n",
                   NULL, "lo\n");
}

static void *accept_one(void *arg) {
  int fd = *(int *)arg;
  int c = accept(fd, NULL, NULL);
  if (c >= 0) {
    (void)!write(c, "pong", 4);
    close(c);
  }
  return NULL;
}

static int loopback_listener(uint16_t *port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
  socklen_t sl = sizeof sa;
  getsockname(fd, (struct sockaddr *)&sa, &sl);
  listen(fd, 4);
  *port = ntohs(sa.sin_port);
  return fd;
}

/* accept_one on a non-blocking listener, giving up after 10 s: when the run
 * is not where it should be, the test fails instead of hanging. */
static void *accept_one_within(void *arg) {
  struct pollfd p = {.fd = *(int *)arg, .events = POLLIN};
  if (poll(&p, 1, 10000) == 1)
    accept_one(arg);
  return NULL;
}

/* The network profile runs in the namespace its caller made (here with a
 * listener inside), never in the host's: the run reaches the listener in
 * its namespace, not one on the host's loopback, and still opens no raw or
 * packet socket. Without a network namespace the profile is refused. */
static void test_network_profile_runs_in_the_given_namespace(void **state) {
  skip_in_zygote_mode("the network profile is the package installer's, never a zygote's "
                      "(test_zygote_refuses_what_it_cannot_run checks the refusal)");
  struct sandbox_error err = {0};
  int inner = -1;
  int ns = sandbox_netns_create(0, &inner, &err);
  assert_true(ns >= 0);
  struct sockaddr_in sa;
  socklen_t sl = sizeof sa;
  getsockname(inner, (struct sockaddr *)&sa, &sl);
  uint16_t host_port;
  int host = loopback_listener(&host_port);
  pthread_t th;
  pthread_create(&th, NULL, accept_one_within, &inner);
  char code[768];
  snprintf(
      code, sizeof code,
      "import socket\n"
      "s = socket.create_connection(('127.0.0.1', %d), timeout=3)\n"
      "print(s.recv(4).decode())\n"
      "try:\n"
      "    socket.create_connection(('127.0.0.1', %d), timeout=3); print('host reached')\n"
      "except ConnectionRefusedError:\n"
      "    print('refused')\n"
      "for fam, typ in [(socket.AF_PACKET, socket.SOCK_RAW), (socket.AF_INET, socket.SOCK_RAW)]:\n"
      "    try:\n"
      "        socket.socket(fam, typ); print('opened')\n"
      "    except PermissionError:\n"
      "        print('blocked')\n",
      ntohs(sa.sin_port), host_port);
  const char *argv[] = {PY, "-I", "-c", code, NULL};
  char ws[WS_PATH];
  snprintf(ws, sizeof ws, "%s/netws", state_dir);
  mkdir(ws, 0755);
  struct sandbox_spec spec = {.argv = argv, .workspace_dir = ws, .network = true, .netns_fd = ns};
  struct sandbox_result r;
  assert_int_equal(sandbox_run(engine, 0, &spec, &r, &err), 0);
  pthread_join(th, NULL);
  static const char want[] = "pong\nrefused\nblocked\nblocked\n";
  assert_int_equal(r.stdout_len, strlen(want));
  assert_memory_equal(r.stdout_data, want, r.stdout_len);
  sandbox_result_free(&r);
  /* No namespace of the caller's, or a descriptor that is not one: refused,
   * never the host's namespace instead. */
  spec.netns_fd = -1;
  assert_int_equal(sandbox_run(engine, 0, &spec, &r, &err), -1);
  assert_int_equal(err.errnum, EINVAL);
  spec.netns_fd = host;
  assert_int_equal(sandbox_run(engine, 0, &spec, &r, &err), -1);
  assert_int_equal(err.errnum, EINVAL);
  close(host);
  close(inner);
  close(ns);
  rmdir(ws);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup(test_network_connect_is_permission_error, test_setup),
    cmocka_unit_test_setup(test_network_namespace_has_only_lo, test_setup),
    cmocka_unit_test_setup(test_network_profile_runs_in_the_given_namespace, test_setup),
};
const struct engine_tests engine_net_tests = ENGINE_TESTS(tests);
