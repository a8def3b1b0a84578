/* Unit tests: which addresses the download guard treats as public. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "netaddr.h"

static bool judge(const char *text, const char **why) {
  struct sockaddr_storage ss;
  memset(&ss, 0, sizeof ss);
  if (strchr(text, ':') != NULL) {
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
    in6->sin6_family = AF_INET6;
    assert_int_equal(inet_pton(AF_INET6, text, &in6->sin6_addr), 1);
    return netaddr_is_public((struct sockaddr *)in6, sizeof *in6, why);
  }
  struct sockaddr_in *in = (struct sockaddr_in *)&ss;
  in->sin_family = AF_INET;
  assert_int_equal(inet_pton(AF_INET, text, &in->sin_addr), 1);
  return netaddr_is_public((struct sockaddr *)in, sizeof *in, why);
}

static void test_not_public(void **state) {
  static const struct {
    const char *addr, *kind;
  } cases[] = {
      {"127.0.0.1", "loopback"},
      {"127.255.255.254", "loopback"},
      {"10.0.0.1", "private"},
      {"172.16.0.1", "private"},
      {"172.31.255.255", "private"},
      {"192.168.1.1", "private"},
      {"169.254.169.254", "link-local"},
      {"100.64.0.1", "shared"},
      {"0.0.0.0", "this network"},
      {"0.1.2.3", "this network"},
      {"224.0.0.1", "multicast"},
      {"255.255.255.255", "reserved"},
      {"198.18.0.1", "benchmarking"},
      {"192.0.2.1", "documentation"},
      {"::1", "loopback"},
      {"::", "unspecified"},
      {"fe80::1", "link-local"},
      {"fc00::1", "unique local"},
      {"fd12:3456::1", "unique local"},
      {"ff02::1", "multicast"},
      {"::ffff:127.0.0.1", "loopback"},
      {"::ffff:10.0.0.1", "private"},
      {"::ffff:169.254.169.254", "link-local"},
      {"64:ff9b::a9fe:a9fe", "link-local"}, /* NAT64 of 169.254.169.254 */
      {"2002:7f00:1::", "loopback"},        /* 6to4 of 127.0.0.1 */
      {"2002:c0a8:101::1", "private"},      /* 6to4 of 192.168.1.1 */
      {"::127.0.0.1", "loopback"},          /* IPv4-compatible */
      {"2001:db8::1", "documentation"},
      {"fec0::1", "site-local"},
      {"4000::1", "not global unicast"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const char *why = NULL;
    bool pub = judge(cases[i].addr, &why);
    if (pub || why == NULL || strstr(why, cases[i].kind) == NULL)
      fail_msg("%s: public=%d why=%s (want %s)", cases[i].addr, pub, why ? why : "(null)",
               cases[i].kind);
  }
}

static void test_public(void **state) {
  static const char *const cases[] = {"1.1.1.1",          "8.8.8.8",           "93.184.216.34",
                                      "172.15.255.255",   "172.32.0.1",        "100.63.255.255",
                                      "100.128.0.1",      "169.253.0.1",       "11.0.0.1",
                                      "2606:4700::1111",  "2a00:1450:4001::1", "::ffff:8.8.8.8",
                                      "64:ff9b::808:808", "2002:808:808::1"};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const char *why = NULL;
    if (!judge(cases[i], &why))
      fail_msg("%s judged not public: %s", cases[i], why);
  }
}

static void test_other_families_and_short_lengths(void **state) {
  struct sockaddr_in in;
  memset(&in, 0, sizeof in);
  in.sin_family = AF_INET;
  inet_pton(AF_INET, "8.8.8.8", &in.sin_addr);
  const char *why = NULL;
  assert_false(netaddr_is_public((struct sockaddr *)&in, 4, &why)); /* truncated */
  struct sockaddr sa = {.sa_family = AF_UNIX};
  assert_false(netaddr_is_public(&sa, sizeof sa, &why));
  assert_false(netaddr_is_public(NULL, 0, &why));
  char buf[64];
  netaddr_format((struct sockaddr *)&in, sizeof in, buf, sizeof buf);
  assert_string_equal(buf, "8.8.8.8");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_not_public),
      cmocka_unit_test(test_public),
      cmocka_unit_test(test_other_families_and_short_lengths),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
