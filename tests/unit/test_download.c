/* Downloads against a tiny HTTP server of the test's own on 127.0.0.1 (no
 * network): redirects followed by hand and checked at every hop (scheme,
 * host, address), the address policy on the address actually connected to,
 * the size cap while receiving (with and without a Content-Length), the
 * whole chain's timeout, and the error a client is told for each. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "download.h"

static int listen_fd = -1;
static int port;
static pthread_t server_thread;

/* The response for one request path; NULL closes without answering. */
static void respond(int fd, const char *path) {
  char out[512];
  static char big[100000];
  if (strcmp(path, "/ok") == 0) {
    dprintf(fd, "HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\nhello");
  } else if (strcmp(path, "/relative") == 0) {
    dprintf(fd, "HTTP/1.0 302 Found\r\nLocation: /ok\r\nContent-Length: 0\r\n\r\n");
  } else if (strcmp(path, "/absolute") == 0) {
    dprintf(fd, "HTTP/1.0 301 Moved\r\nLocation: http://127.0.0.1:%d/relative\r\n\r\n", port);
  } else if (strcmp(path, "/loop") == 0) {
    dprintf(fd, "HTTP/1.0 302 Found\r\nLocation: /loop\r\n\r\n");
  } else if (strcmp(path, "/to-ftp") == 0) {
    dprintf(fd, "HTTP/1.0 302 Found\r\nLocation: ftp://127.0.0.1/x\r\n\r\n");
  } else if (strcmp(path, "/to-file") == 0) {
    dprintf(fd, "HTTP/1.0 302 Found\r\nLocation: file:///etc/shadow\r\n\r\n");
  } else if (strcmp(path, "/to-localhost") == 0) {
    dprintf(fd, "HTTP/1.0 302 Found\r\nLocation: http://localhost:%d/ok\r\n\r\n", port);
  } else if (strcmp(path, "/missing") == 0) {
    dprintf(fd, "HTTP/1.0 404 Not Found\r\nContent-Length: 0\r\n\r\n");
  } else if (strcmp(path, "/big") == 0) {
    dprintf(fd, "HTTP/1.0 200 OK\r\nContent-Length: %zu\r\n\r\n", sizeof big);
    memset(big, 'x', sizeof big);
    (void)!write(fd, big, sizeof big);
  } else if (strcmp(path, "/big-unannounced") == 0) {
    dprintf(fd, "HTTP/1.0 200 OK\r\n\r\n");
    memset(big, 'y', sizeof big);
    (void)!write(fd, big, sizeof big);
  } else if (strcmp(path, "/slow") == 0) {
    sleep(2);
    snprintf(out, sizeof out, "HTTP/1.0 200 OK\r\nContent-Length: 4\r\n\r\nlate");
    (void)!write(fd, out, strlen(out));
  }
}

static void *serve(void *arg) {
  (void)arg;
  for (;;) {
    int fd = accept(listen_fd, NULL, NULL);
    if (fd < 0)
      return NULL;
    char req[2048];
    ssize_t n = read(fd, req, sizeof req - 1);
    char path[256] = "";
    if (n > 0) {
      req[n] = '\0';
      sscanf(req, "GET %255s", path);
      respond(fd, path);
    }
    close(fd);
  }
}

static int setup(void **state) {
  (void)state;
  assert_int_equal(download_global_init(), 0);
  listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  assert_int_equal(bind(listen_fd, (struct sockaddr *)&sa, sizeof sa), 0);
  assert_int_equal(listen(listen_fd, 16), 0);
  socklen_t len = sizeof sa;
  getsockname(listen_fd, (struct sockaddr *)&sa, &len);
  port = ntohs(sa.sin_port);
  return pthread_create(&server_thread, NULL, serve, NULL);
}

static int teardown(void **state) {
  (void)state;
  shutdown(listen_fd, SHUT_RDWR);
  close(listen_fd);
  pthread_join(server_thread, NULL);
  return 0;
}

static struct sbx_error err;

/* Fetches path from the test server; on success body must be want. */
static int fetch(const struct download_policy *p, const char *path, const char *want) {
  char url[128];
  snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, path);
  uint8_t *body = NULL;
  size_t len = 0;
  memset(&err, 0, sizeof err);
  int rc = download_fetch(p, url, &body, &len, &err);
  if (rc == 0) {
    assert_non_null(want);
    assert_int_equal(len, strlen(want));
    assert_memory_equal(body, want, len);
  } else {
    assert_null(body);
    assert_int_equal(err.code, SBX_FAILED_PRECONDITION);
  }
  free(body);
  return rc;
}

static const struct download_policy open_private = {
    .allowed_hosts = "", .allow_private = true, .timeout_ms = 5000, .max_bytes = 1024};

static void fetched_and_redirects_followed(void **state) {
  assert_int_equal(fetch(&open_private, "/ok", "hello"), 0);
  assert_int_equal(fetch(&open_private, "/relative", "hello"), 0);
  assert_int_equal(fetch(&open_private, "/absolute", "hello"), 0); /* two hops */
}

static void loopback_refused_by_default(void **state) {
  struct download_policy p = open_private;
  p.allow_private = false;
  assert_int_equal(fetch(&p, "/ok", NULL), -1);
  assert_non_null(strstr(err.msg, "address 127.0.0.1 is loopback"));
  assert_non_null(strstr(err.msg, "download-allow-private"));
  /* A host the operator named is trusted wherever it resolves... */
  p.allowed_hosts = "127.0.0.1";
  assert_int_equal(fetch(&p, "/relative", "hello"), 0);
  /* ...and no other, not even through a redirect. */
  assert_int_equal(fetch(&p, "/to-localhost", NULL), -1);
  assert_non_null(strstr(err.msg, "redirected to http://localhost:"));
  assert_non_null(strstr(err.msg, "host localhost is not in download-hosts"));
}

static void redirects_checked_at_every_hop(void **state) {
  assert_int_equal(fetch(&open_private, "/to-ftp", NULL), -1);
  assert_non_null(strstr(err.msg, "scheme ftp is not allowed"));
  assert_int_equal(fetch(&open_private, "/to-file", NULL), -1);
  assert_non_null(strstr(err.msg, "scheme file is not allowed"));
  assert_int_equal(fetch(&open_private, "/loop", NULL), -1);
  assert_string_equal(err.msg, "more than 5 redirects");
}

static void status_size_and_time(void **state) {
  assert_int_equal(fetch(&open_private, "/missing", NULL), -1);
  assert_string_equal(err.msg, "HTTP status 404");
  assert_int_equal(fetch(&open_private, "/big", NULL), -1);
  assert_string_equal(err.msg, "larger than 1 KiB (max-file-bytes)");
  assert_int_equal(fetch(&open_private, "/big-unannounced", NULL), -1); /* while receiving */
  assert_string_equal(err.msg, "larger than 1 KiB (max-file-bytes)");
  struct download_policy p = open_private;
  p.timeout_ms = 300;
  assert_int_equal(fetch(&p, "/slow", NULL), -1);
  assert_string_equal(err.msg, "timed out after 300 ms");
}

static void url_syntax(void **state) {
  assert_true(download_url_syntax_ok("https://example.com/a.csv"));
  assert_true(download_url_syntax_ok("HTTP://example.com/"));
  assert_false(download_url_syntax_ok("ftp://example.com/a"));
  assert_false(download_url_syntax_ok("file:///etc/passwd"));
  assert_false(download_url_syntax_ok("http://example.com/a b"));
  assert_false(download_url_syntax_ok("http://example.com/\x7f"));
  assert_false(download_url_syntax_ok(""));
  assert_false(download_url_syntax_ok("http://example.com/caf\xc3\xa9")); /* percent-encode it */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(fetched_and_redirects_followed),
      cmocka_unit_test(loopback_refused_by_default),
      cmocka_unit_test(redirects_checked_at_every_hop),
      cmocka_unit_test(status_size_and_time),
      cmocka_unit_test(url_syntax),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
