/* Unit tests: the egress proxy's request heads (egress_head.c), as pip and
 * as hostile build steps send them; the heads sent on; refusals; and the
 * download policy both the proxy and the downloader apply (download.h). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "download.h"
#include "egress_head.h"

static int parse(const char *head, struct egress_request *req, char *why, size_t whylen) {
  why[0] = '\0';
  return egress_parse_head(head, strlen(head), req, why, whylen);
}

static void test_connect_as_pip_sends_it(void **state) {
  struct egress_request r;
  char why[256];
  /* http.client's tunnel: HTTP/1.0 and a Host header. */
  assert_int_equal(
      parse("CONNECT pypi.org:443 HTTP/1.0\r\nHost: pypi.org:443\r\n\r\n", &r, why, sizeof why), 0);
  assert_int_equal(r.method, EGRESS_CONNECT);
  assert_string_equal(r.host, "pypi.org");
  assert_int_equal(r.port, 443);
  assert_false(r.host_ipv6);
  assert_int_equal(parse("CONNECT 10.1.2.3:8443 HTTP/1.1\r\n\r\n", &r, why, sizeof why), 0);
  assert_string_equal(r.host, "10.1.2.3");
  assert_int_equal(r.port, 8443);
  assert_int_equal(parse("CONNECT [2001:db8::1]:443 HTTP/1.1\r\n\r\n", &r, why, sizeof why), 0);
  assert_string_equal(r.host, "2001:db8::1");
  assert_true(r.host_ipv6);
  char auth[300];
  egress_authority(&r, true, auth, sizeof auth);
  assert_string_equal(auth, "[2001:db8::1]:443");
}

static void test_get_absolute_form(void **state) {
  struct egress_request r;
  char why[256];
  const char *head = "GET http://127.0.0.1:8080/simple/sbx-net/?a=1 HTTP/1.1\r\n"
                     "Host: 127.0.0.1:8080\r\nUser-Agent: pip/23\r\nAccept-Encoding: gzip\r\n"
                     "Connection: keep-alive\r\nProxy-Authorization: Basic eA==\r\n\r\n";
  assert_int_equal(parse(head, &r, why, sizeof why), 0);
  assert_int_equal(r.method, EGRESS_GET);
  assert_string_equal(r.host, "127.0.0.1");
  assert_int_equal(r.port, 8080);
  assert_int_equal(r.n_headers, 2); /* Host, Connection, Proxy-Authorization left out */
  char out[EGRESS_FORWARD_MAX];
  size_t n = egress_forward_head(&r, head, false, out, sizeof out);
  assert_true(n > 0);
  out[n] = '\0';
  assert_string_equal(out, "GET /simple/sbx-net/?a=1 HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n"
                           "User-Agent: pip/23\r\nAccept-Encoding: gzip\r\n"
                           "Connection: close\r\n\r\n");
  n = egress_forward_head(&r, head, true, out, sizeof out);
  out[n] = '\0';
  assert_non_null(strstr(out, "GET http://127.0.0.1:8080/simple/sbx-net/?a=1 HTTP/1.1\r\n"));
  /* No path: "/"; port 80 by default, and then not in Host. */
  assert_int_equal(parse("HEAD http://Example.COM HTTP/1.1\r\n\r\n", &r, why, sizeof why), 0);
  assert_int_equal(r.method, EGRESS_HEAD);
  assert_int_equal(r.port, 80);
  n = egress_forward_head(&r, "HEAD http://Example.COM HTTP/1.1\r\n\r\n", false, out, sizeof out);
  out[n] = '\0';
  assert_string_equal(out, "HEAD / HTTP/1.1\r\nHost: Example.COM\r\nConnection: close\r\n\r\n");
  /* A zero Content-Length is no body. */
  assert_int_equal(
      parse("GET http://a/ HTTP/1.1\r\nContent-Length: 0\r\n\r\n", &r, why, sizeof why), 0);
}

static void test_refused_heads(void **state) {
  static const struct {
    const char *head;
    int status;
    const char *why;
  } cases[] = {
      {"POST http://a/ HTTP/1.1\r\n\r\n", 405, "method POST"},
      {"connect a:443 HTTP/1.1\r\n\r\n", 405, "not allowed"},
      {"CONNECT a:443 HTTP/2.0\r\n\r\n", 400, "HTTP/1.0 or HTTP/1.1"},
      {"CONNECT a:443  HTTP/1.1\r\n\r\n", 400, "HTTP/1.0 or HTTP/1.1"},
      {"CONNECT a:443\r\n\r\n", 400, "request line"},
      {"CONNECT a HTTP/1.1\r\n\r\n", 400, "host:port"},
      {"CONNECT a:0 HTTP/1.1\r\n\r\n", 400, "port"},
      {"CONNECT a:65536 HTTP/1.1\r\n\r\n", 400, "port"},
      {"CONNECT a:0443 HTTP/1.1\r\n\r\n", 400, "port"},
      {"CONNECT a:+443 HTTP/1.1\r\n\r\n", 400, "port"},
      {"CONNECT a:443x HTTP/1.1\r\n\r\n", 400, "port"},
      {"CONNECT ::1:443 HTTP/1.1\r\n\r\n", 400, "plain host"},
      {"CONNECT [::1:443 HTTP/1.1\r\n\r\n", 400, "unclosed"},
      {"CONNECT [zz::1]:443 HTTP/1.1\r\n\r\n", 400, "IPv6"},
      {"CONNECT []:443 HTTP/1.1\r\n\r\n", 400, "IPv6"},
      {"CONNECT user@a:443 HTTP/1.1\r\n\r\n", 400, "plain host"},
      {"CONNECT .a:443 HTTP/1.1\r\n\r\n", 400, "plain host"},
      {"CONNECT a..b:443 HTTP/1.1\r\n\r\n", 400, "plain host"},
      {"CONNECT a.:443 HTTP/1.1\r\n\r\n", 400, "plain host"},
      {"CONNECT a%2e:443 HTTP/1.1\r\n\r\n", 400, "plain host"},
      {"CONNECT :443 HTTP/1.1\r\n\r\n", 400, "plain host"},
      {"GET https://a/ HTTP/1.1\r\n\r\n", 400, "CONNECT"},
      {"GET /relative HTTP/1.1\r\n\r\n", 400, "absolute http://"},
      {"GET ftp://a/ HTTP/1.1\r\n\r\n", 400, "absolute http://"},
      {"GET http://a?x HTTP/1.1\r\n\r\n", 400, "start with '/'"},
      {"GET http://u:p@a/ HTTP/1.1\r\n\r\n", 400, "port"},
      {"GET http://u@a/ HTTP/1.1\r\n\r\n", 400, "plain host"},
      {"GET http://a/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 400, "body"},
      {"GET http://a/ HTTP/1.1\r\nContent-Length: 5\r\n\r\n", 400, "body"},
      {"GET http://a/ HTTP/1.1\r\nX: a\r\n folded\r\n\r\n", 400, "folded"},
      {"GET http://a/ HTTP/1.1\r\nNo colon here\r\n\r\n", 400, "Name: value"},
      {"GET http://a/ HTTP/1.1\r\nName : v\r\n\r\n", 400, "Name: value"},
      {"GET http://a/ HTTP/1.1\r\n: v\r\n\r\n", 400, "Name: value"},
      {"GET http://a/ HTTP/1.1\nHost: a\r\n\r\n", 400, "CRLF"},
      {"GET http://a/ HTTP/1.1\r\nX: a\rb\r\n\r\n", 400, "CRLF"},
      {"GET http://a/\x7f HTTP/1.1\r\n\r\n", 400, "printable"},
      {"GET http://a/\xc3\xa9 HTTP/1.1\r\n\r\n", 400, "printable"},
      {"\r\nGET http://a/ HTTP/1.1\r\n\r\n", 400, "request line"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    struct egress_request r;
    char why[256];
    int st = parse(cases[i].head, &r, why, sizeof why);
    if (st != cases[i].status || strstr(why, cases[i].why) == NULL)
      fail_msg("case %zu (%s): status %d, why \"%s\"", i, cases[i].head, st, why);
  }
}

static void test_bounds(void **state) {
  struct egress_request r;
  char why[256];
  /* A NUL byte inside. */
  static const char nul[] = "CONNECT a:443 HTTP/1.1\r\nX: a\0b\r\n\r\n";
  assert_int_equal(egress_parse_head(nul, sizeof nul - 1, &r, why, sizeof why), 400);
  /* Not ending where the head ends, or not at all. */
  static const char two[] = "CONNECT a:443 HTTP/1.1\r\n\r\nX: a\r\n\r\n";
  assert_int_equal(egress_parse_head(two, sizeof two - 1, &r, why, sizeof why), 400);
  assert_int_equal(egress_parse_head("CONNECT a:443 HTTP/1.1\r\n", 24, &r, why, sizeof why), 400);
  assert_int_equal(egress_parse_head("", 0, &r, why, sizeof why), 400);
  assert_int_equal(egress_head_end("abc\r\n\r\nrest", 11), 7);
  assert_int_equal(egress_head_end("abc\r\n\r", 6), 0);
  /* 64 header lines pass, 65 do not; a head past 8 KiB does not. */
  static char big[EGRESS_HEAD_MAX + 64];
  size_t n = (size_t)snprintf(big, sizeof big, "CONNECT a:443 HTTP/1.1\r\n");
  for (int i = 0; i < 64; i++)
    n += (size_t)snprintf(big + n, sizeof big - n, "X-%d: v\r\n", i);
  memcpy(big + n, "\r\n", 3);
  assert_int_equal(egress_parse_head(big, n + 2, &r, why, sizeof why), 0);
  memcpy(big + n, "Y: v\r\n\r\n", 9);
  assert_int_equal(egress_parse_head(big, n + 8, &r, why, sizeof why), 431);
  memset(big, 'a', sizeof big);
  memcpy(big, "GET http://a/", 13);
  memcpy(big + EGRESS_HEAD_MAX - 13, " HTTP/1.1\r\n\r\n", 13);
  assert_int_equal(egress_parse_head(big, EGRESS_HEAD_MAX, &r, why, sizeof why), 0);
  assert_int_equal(r.path.len, EGRESS_HEAD_MAX - 13 - 12);
  char out[EGRESS_FORWARD_MAX];
  assert_true(egress_forward_head(&r, big, true, out, sizeof out) > 0);
  assert_int_equal(egress_forward_head(&r, big, true, out, 100), 0);
  memcpy(big + EGRESS_HEAD_MAX - 12, " HTTP/1.1\r\n\r\n", 13);
  assert_int_equal(egress_parse_head(big, EGRESS_HEAD_MAX + 1, &r, why, sizeof why), 431);
  /* A host name of 253 bytes passes, 254 do not. */
  char host[300];
  memset(host, 'h', sizeof host);
  char head[400];
  snprintf(head, sizeof head, "CONNECT %.253s:443 HTTP/1.1\r\n\r\n", host);
  assert_int_equal(parse(head, &r, why, sizeof why), 0);
  snprintf(head, sizeof head, "CONNECT %.254s:443 HTTP/1.1\r\n\r\n", host);
  assert_int_equal(parse(head, &r, why, sizeof why), 400);
}

static void test_connect_head_and_refusal(void **state) {
  struct egress_request r;
  char why[256], out[1024];
  assert_int_equal(parse("CONNECT pypi.org:443 HTTP/1.0\r\n\r\n", &r, why, sizeof why), 0);
  size_t n = egress_connect_head(&r, out, sizeof out);
  out[n] = '\0';
  assert_string_equal(out, "CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org:443\r\n\r\n");
  /* A reason with line breaks and bytes outside ASCII cannot split the
   * status line or add headers. */
  n = egress_refusal(403, "bad\r\nX-Injected: 1\x80", out, sizeof out);
  out[n] = '\0';
  assert_non_null(strstr(out, "HTTP/1.1 403 sandboxd egress: bad??X-Injected: 1?\r\n"));
  assert_null(strstr(out, "\r\nX-Injected"));
  const char *body = strstr(out, "\r\n\r\n") + 4;
  char cl[64];
  snprintf(cl, sizeof cl, "Content-Length: %zu\r\n", strlen(body));
  assert_non_null(strstr(out, cl));
  assert_string_equal(body, "sandboxd egress: bad??X-Injected: 1?\n");
}

static void set_addr(struct sockaddr_storage *ss, const char *text, socklen_t *len) {
  memset(ss, 0, sizeof *ss);
  struct sockaddr_in *in = (struct sockaddr_in *)ss;
  in->sin_family = AF_INET;
  assert_int_equal(inet_pton(AF_INET, text, &in->sin_addr), 1);
  *len = sizeof *in;
}

/* The one policy: hosts first, then the addresses they resolved to. */
static void test_download_policy(void **state) {
  struct sbx_error err;
  struct sockaddr_storage ss;
  socklen_t len;
  struct download_policy open = {.allowed_hosts = ""};
  set_addr(&ss, "127.0.0.1", &len);
  assert_int_equal(download_policy_host(&open, "localhost", &err), 0);
  assert_int_equal(download_policy_address(&open, (struct sockaddr *)&ss, len, &err), -1);
  assert_string_equal(err.msg, "address 127.0.0.1 is loopback (127.0.0.0/8)");
  set_addr(&ss, "93.184.216.34", &len);
  assert_int_equal(download_policy_address(&open, (struct sockaddr *)&ss, len, &err), 0);
  /* Named hosts are trusted wherever they resolve; others are refused. */
  struct download_policy named = {.allowed_hosts = "files.example, 127.0.0.1"};
  assert_int_equal(download_policy_host(&named, "127.0.0.1", &err), 0);
  assert_int_equal(download_policy_host(&named, "FILES.example", &err), 0);
  assert_int_equal(download_policy_host(&named, "127.1", &err), -1);
  assert_string_equal(err.msg, "host 127.1 is not in download-hosts");
  set_addr(&ss, "10.0.0.1", &len);
  assert_int_equal(download_policy_address(&named, (struct sockaddr *)&ss, len, &err), 0);
  struct download_policy priv = {.allowed_hosts = "", .allow_private = true};
  assert_int_equal(download_policy_address(&priv, (struct sockaddr *)&ss, len, &err), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_connect_as_pip_sends_it),
      cmocka_unit_test(test_get_absolute_form),
      cmocka_unit_test(test_refused_heads),
      cmocka_unit_test(test_bounds),
      cmocka_unit_test(test_connect_head_and_refusal),
      cmocka_unit_test(test_download_policy),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
