/* Unit tests: a run's allow list (server/fetch/egress_allow.c): the entry
 * grammar, good and bad, with the reasons a caller shows; the spelling it
 * formats back; which entries lie within a ceiling; and what the egress
 * proxy lets through, by target (a name or an IP literal) and by the
 * address a name resolved to. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/un.h>

#include <cmocka.h>

#include "egress_allow.h"

static struct egress_allow_entry parse_ok(const char *text) {
  struct egress_allow_entry e;
  char why[256] = "";
  if (egress_allow_parse(text, &e, why, sizeof why) != 0)
    fail_msg("'%s' refused: %s", text, why);
  return e;
}

/* Refused, for the reason given, in at most 160 bytes. */
static void parse_refused(const char *text, const char *reason) {
  struct egress_allow_entry e;
  char why[512] = "";
  if (egress_allow_parse(text, &e, why, sizeof why) == 0)
    fail_msg("'%s' accepted", text);
  if (strstr(why, reason) == NULL)
    fail_msg("'%s': reason '%s' lacks '%s'", text, why, reason);
  if (strlen(why) >= 160)
    fail_msg("'%s': reason '%s' is longer than 159 bytes", text, why);
}

static struct egress_allow list_of(const char *const *texts, size_t n) {
  struct egress_allow l;
  memset(&l, 0, sizeof l);
  assert_true(n <= EGRESS_ALLOW_MAX);
  for (size_t i = 0; i < n; i++)
    l.e[i] = parse_ok(texts[i]);
  l.n = n;
  return l;
}

#define LIST(...)                                                                                  \
  ({                                                                                               \
    static const char *const texts_[] = {__VA_ARGS__};                                             \
    list_of(texts_, sizeof texts_ / sizeof texts_[0]);                                             \
  })

static void test_parse_names(void **state) {
  static const struct {
    const char *text;
    enum egress_allow_kind kind;
    const char *name;
    uint16_t port;
  } cases[] = {
      {"example.com", EGRESS_ALLOW_HOST, "example.com", 0},
      {"EXAMPLE.Com", EGRESS_ALLOW_HOST, "example.com", 0},
      {"pypi.org:443", EGRESS_ALLOW_HOST, "pypi.org", 443},
      {"localhost", EGRESS_ALLOW_HOST, "localhost", 0},
      {"a-b.c_d.example", EGRESS_ALLOW_HOST, "a-b.c_d.example", 0},
      {"_dmarc.example.com", EGRESS_ALLOW_HOST, "_dmarc.example.com", 0},
      {"1.2.3.4.example.com", EGRESS_ALLOW_HOST, "1.2.3.4.example.com", 0},
      {"x.0a", EGRESS_ALLOW_HOST, "x.0a", 0},
      {"a:1", EGRESS_ALLOW_HOST, "a", 1},
      {"a:65535", EGRESS_ALLOW_HOST, "a", 65535},
      {"*.example.com", EGRESS_ALLOW_DOMAIN, "example.com", 0},
      {"*.Example.COM:8080", EGRESS_ALLOW_DOMAIN, "example.com", 8080},
      {"*.com", EGRESS_ALLOW_DOMAIN, "com", 0},
      {"*", EGRESS_ALLOW_ANY, "", 0},
      {"*:443", EGRESS_ALLOW_ANY, "", 443},
  };
  (void)state;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    struct egress_allow_entry e = parse_ok(cases[i].text);
    assert_int_equal(e.kind, cases[i].kind);
    assert_string_equal(e.name, cases[i].name);
    assert_int_equal(e.port, cases[i].port);
  }
}

static void test_parse_addresses(void **state) {
  static const struct {
    const char *text;
    int family;
    const char *addr;
    unsigned prefix;
    uint16_t port;
  } cases[] = {
      {"198.51.100.0/24", AF_INET, "198.51.100.0", 24, 0},
      {"198.51.100.7", AF_INET, "198.51.100.7", 32, 0},
      {"198.51.100.7/32", AF_INET, "198.51.100.7", 32, 0},
      {"1.2.3.4:80", AF_INET, "1.2.3.4", 32, 80},
      {"10.0.0.0/8:443", AF_INET, "10.0.0.0", 8, 443},
      {"0.0.0.0/0", AF_INET, "0.0.0.0", 0, 0},
      {"2001:db8::/32", AF_INET6, "2001:db8::", 32, 0},
      {"2001:DB8::1", AF_INET6, "2001:db8::1", 128, 0},
      {"[2001:db8::1]:443", AF_INET6, "2001:db8::1", 128, 443},
      {"[2001:db8::/32]:443", AF_INET6, "2001:db8::", 32, 443},
      {"[::1]", AF_INET6, "::1", 128, 0},
      {"::/0", AF_INET6, "::", 0, 0},
      /* Never split on the last ':': an address, not port 443. */
      {"2001:db8::1:443", AF_INET6, "2001:db8::1:443", 128, 0},
  };
  (void)state;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    struct egress_allow_entry e = parse_ok(cases[i].text);
    uint8_t want[16] = {0};
    assert_int_equal(e.kind, EGRESS_ALLOW_CIDR);
    assert_int_equal(e.family, cases[i].family);
    assert_int_equal(inet_pton(cases[i].family, cases[i].addr, want), 1);
    assert_memory_equal(e.addr, want, sizeof want);
    assert_int_equal(e.prefix, cases[i].prefix);
    assert_int_equal(e.port, cases[i].port);
  }
}

static void test_parse_refused(void **state) {
  static const struct {
    const char *text, *reason;
  } cases[] = {
      {"", "an empty entry"},
      {" example.com", "a space"},
      {"example.com:443 ", "a space"},
      {"example.com\n", "byte 0x0a"},
      {"ex\xc3\xa4mple.com", "byte 0xc3"},
      {"example.com.", "a trailing dot"},
      {"a..b", "an empty label"},
      {".a", "an empty label"},
      {"-a.com", "starts or ends with '-'"},
      {"a-.com", "starts or ends with '-'"},
      {"a.-b.com", "starts or ends with '-'"},
      {"ex!ample.com", "only letters, digits, '-', '_' and dots"},
      {"a.*.com", "'*' only as the whole first label"},
      {"*example.com", "'*' only as the whole first label"},
      {"**.com", "'*' only as the whole first label"},
      {"*.*.com", "'*' only as the whole first label"},
      {"*.", "'*.' without a domain"},
      /* Digits and dots are an IPv4 address or nothing, never a name. */
      {"1.2.3", "'1.2.3' is not an IPv4 address"},
      {"01.2.3.4", "is not an IPv4 address"},
      {"1.2.3.4.5", "is not an IPv4 address"},
      {"256.1.1.1", "is not an IPv4 address"},
      {"2130706433", "is not an IPv4 address"},
      {"1.2.3.4.:443", "is not an IPv4 address"},
      /* Nor what getaddrinfo would read as an address. */
      {"0x7f.0.0.1", "its last label is not a number"},
      {"example.123", "its last label is not a number"},
      {"a.0x1f", "its last label is not a number"},
      {"example.com:0", "port 0 is out of range (1-65535)"},
      {"example.com:065", "port 065 has a leading zero"},
      {"example.com:00", "leading zero"},
      {"example.com:65536", "port 65536 is out of range (1-65535)"},
      {"example.com:123456", "out of range"},
      {"example.com:+443", "port '+443' is not a decimal number"},
      {"example.com:-1", "not a decimal number"},
      /* The entry's own text is cut in a reason: it stays under 160 bytes. */
      {"example.com:"
       "99999999999999999999999999999999999999999999999999999999999999999999999999999999",
       "out of range (1-65535)"},
      {"10.0.0.0/xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
       "is not a number"},
      {"[::1/xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx]:443",
       "is not a number"},
      {"[yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy]",
       "brackets only around"},
      {"example.com:", "':' without a port"},
      {":443", "no host before ':'"},
      {"example.com:443:1", "is not an IPv6 address"},
      {"10.0.0.1/8", "10.0.0.1/8: host bits set; did you mean 10.0.0.0/8?"},
      {"198.51.100.7/24:443", "did you mean 198.51.100.0/24?"},
      {"2001:db8::1/32", "2001:db8::1/32: host bits set; did you mean 2001:db8::/32?"},
      {"10.0.0.0/33", "CIDR prefix /33 is longer than 32"},
      {"10.0.0.0/1000", "CIDR prefix /1000 is longer than 32"},
      {"2001:db8::/129", "CIDR prefix /129 is longer than 128"},
      {"10.0.0.0/08", "CIDR prefix /08 has a leading zero"},
      {"10.0.0.0/", "'/' without a prefix length"},
      {"10.0.0.0/x", "CIDR prefix 'x' is not a number"},
      {"/8", "no address before '/'"},
      {"example.com/24", "'example.com' is not an IPv4 address"},
      {"2001:db8::/32:443", "goes in brackets: [2001:db8::/32]:443"},
      {"fe80::1%eth0", "is not an IPv6 address"},
      {"::ffff:1.2.3.4", "IPv4-mapped address: write the IPv4 address 1.2.3.4"},
      {"[::ffff:1.2.3.4]:443", "write the IPv4 address 1.2.3.4"},
      {"::ffff:1.2.3.0/120", "write the IPv4 CIDR 1.2.3.0/24"},
      {"::ffff:0:0/96", "write the IPv4 CIDR 0.0.0.0/0"},
      {"[::1", "'[' without ']'"},
      {"[::1]443", "after ']' only ':' and a port"},
      {"[::1]:", "':' without a port"},
      {"[::1]:0", "port 0 is out of range"},
      {"[2001:db8::1]:443x", "is not a decimal number"},
      {"[]", "empty brackets"},
      {"[]:443", "empty brackets"},
      {"[1.2.3.4]:80", "brackets only around an IPv6 address or CIDR"},
      {"[example.com]", "brackets only around an IPv6 address or CIDR"},
      {"exa[mple.com", "only letters, digits"},
  };
  (void)state;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    parse_refused(cases[i].text, cases[i].reason);
  /* Arguments: no text, no output, no room for a reason. */
  struct egress_allow_entry e;
  char why[64];
  assert_int_equal(egress_allow_parse(NULL, &e, why, sizeof why), -1);
  assert_int_equal(egress_allow_parse("example.com", NULL, why, sizeof why), -1);
  assert_int_equal(egress_allow_parse("a..b", &e, NULL, 0), -1);
}

/* A refused text leaves the output as it was. */
static void test_parse_refused_leaves_output(void **state) {
  (void)state;
  struct egress_allow_entry e = parse_ok("example.com:443"), before = e;
  char why[128];
  assert_int_equal(egress_allow_parse("10.0.0.1/8", &e, why, sizeof why), -1);
  assert_memory_equal(&e, &before, sizeof e);
}

static void fill(char *buf, size_t n, char c) {
  memset(buf, c, n);
  for (size_t i = 63; i < n; i += 64)
    buf[i] = '.'; /* labels of 63 */
  buf[n] = '\0';
}

/* The grammar's limits: a label of 63, a name of 253 ("*." counting), an
 * entry's text of EGRESS_ALLOW_ENTRY_MAX bytes. */
static void test_parse_lengths(void **state) {
  char text[EGRESS_ALLOW_ENTRY_MAX + 16], out[EGRESS_ALLOW_ENTRY_MAX + 1];
  (void)state;
  memset(text, 'a', 64);
  strcpy(text + 63, ".com");
  parse_ok(text);
  memset(text, 'a', 64);
  strcpy(text + 64, ".com");
  parse_refused(text, "a label longer than 63 bytes");

  fill(text, 253, 'a');
  assert_int_equal(parse_ok(text).kind, EGRESS_ALLOW_HOST);
  fill(text, 254, 'a');
  parse_refused(text, "a DNS name longer than 253 bytes");

  memcpy(text, "*.", 2);
  fill(text + 2, 251, 'a');
  assert_int_equal(parse_ok(text).kind, EGRESS_ALLOW_DOMAIN);
  fill(text + 2, 252, 'a');
  parse_refused(text, "a name below the domain would be longer than 253 bytes");

  /* The longest entry there is: a name of 253 and a port of five digits;
   * it formats into EGRESS_ALLOW_ENTRY_MAX + 1 bytes and back. */
  fill(text, 253, 'a');
  strcat(text, ":65535");
  struct egress_allow_entry e = parse_ok(text), back;
  egress_allow_format(&e, out, sizeof out);
  assert_string_equal(out, text);
  back = parse_ok(out);
  assert_memory_equal(&back, &e, sizeof e);

  /* EGRESS_ALLOW_ENTRY_MAX bytes are read as an entry; one more is not. */
  fill(text, EGRESS_ALLOW_ENTRY_MAX, 'a');
  parse_refused(text, "a DNS name longer than 253 bytes");
  fill(text, EGRESS_ALLOW_ENTRY_MAX + 1, 'a');
  parse_refused(text, "longer than 300 bytes");
  /* Without a NUL: nothing past EGRESS_ALLOW_ENTRY_MAX + 1 bytes is read. */
  char unterminated[EGRESS_ALLOW_ENTRY_MAX + 1];
  memset(unterminated, 'a', sizeof unterminated);
  parse_refused(unterminated, "longer than 300 bytes");
}

static void test_format_round_trip(void **state) {
  static const struct {
    const char *text, *formatted;
  } cases[] = {
      {"EXAMPLE.com:443", "example.com:443"},
      {"*.Example.COM", "*.example.com"},
      {"*", "*"},
      {"*:8080", "*:8080"},
      {"*:*", "*:*"},
      {"127.0.0.0/8:*", "127.0.0.0/8:*"},
      {"[::1/128]:*", "[::1]:*"},
      {"198.51.100.0/24", "198.51.100.0/24"},
      {"198.51.100.7/32", "198.51.100.7"},
      {"10.0.0.0/8:443", "10.0.0.0/8:443"},
      {"0.0.0.0/0", "0.0.0.0/0"},
      {"2001:DB8::/32", "2001:db8::/32"},
      {"[2001:db8::/32]:443", "[2001:db8::/32]:443"},
      {"[2001:db8:0::1]:443", "[2001:db8::1]:443"},
      {"[::1]", "::1"},
      {"::/0", "::/0"},
      {"2001:db8::1:443", "2001:db8::1:443"},
  };
  (void)state;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    struct egress_allow_entry e = parse_ok(cases[i].text);
    char out[EGRESS_ALLOW_ENTRY_MAX + 1];
    egress_allow_format(&e, out, sizeof out);
    assert_string_equal(out, cases[i].formatted);
    struct egress_allow_entry back = parse_ok(out);
    assert_memory_equal(&back, &e, sizeof e);
  }
  /* A short buffer: cut, terminated. */
  struct egress_allow_entry e = parse_ok("example.com:443");
  char small[8];
  egress_allow_format(&e, small, sizeof small);
  assert_string_equal(small, "example");
}

static void test_within(void **state) {
  static const struct {
    const char *entry, *ceiling;
    bool within;
  } cases[] = {
      /* Names. */
      {"example.com", "example.com", true},
      {"example.com", "other.com", false},
      {"example.com", "*.example.com", false}, /* the domain itself is not below it */
      {"a.example.com", "*.example.com", true},
      {"a.b.example.com", "*.example.com", true},
      {"badexample.com", "*.example.com", false},
      {"a.example.com", "a.example.com.evil", false},
      {"example.com", "*", true},
      {"*.example.com", "*.example.com", true},
      {"*.a.example.com", "*.example.com", true},
      {"*.example.com", "*.a.example.com", false},
      {"*.example.com", "example.com", false},
      {"*.example.com", "a.example.com", false},
      {"*.badexample.com", "*.example.com", false},
      {"*.example.com", "*", true},
      {"*", "*", true},
      /* Any port (":*"): covers every port; is covered only by itself. */
      {"example.com:8080", "example.com:*", true},
      {"example.com", "*:*", true},
      {"127.0.0.1:5432", "127.0.0.0/8:*", true},
      {"127.0.0.0/8:*", "127.0.0.0/8:*", true},
      {"example.com:*", "example.com", false},
      {"example.com:*", "example.com:443", false},
      {"127.0.0.0/8:*", "127.0.0.0/8", false},
      {"*", "*.com", false},
      {"*", "example.com", false},
      /* Names and CIDRs never cover each other. */
      {"example.com", "0.0.0.0/0", false},
      {"*", "::/0", false},
      {"1.2.3.4", "*", false},
      {"2001:db8::1", "*", false},
      /* CIDRs. */
      {"10.0.0.0/8", "10.0.0.0/8", true},
      {"10.1.0.0/16", "10.0.0.0/8", true},
      {"10.0.0.5", "10.0.0.0/8", true},
      {"10.0.0.0/9", "10.0.0.0/8", true},
      {"10.128.0.0/9", "10.0.0.0/9", false},
      {"10.0.0.0/8", "10.1.0.0/16", false},
      {"10.0.0.0/7", "10.0.0.0/8", false},
      {"11.0.0.0/8", "10.0.0.0/8", false},
      {"1.2.3.4", "0.0.0.0/0", true},
      {"1.2.3.4", "1.2.3.4", true},
      {"1.2.3.5", "1.2.3.4", false},
      {"2001:db8:1::/48", "2001:db8::/32", true},
      {"2001:db8::1", "2001:db8::/32", true},
      {"2001:db9::/32", "2001:db8::/32", false},
      {"2001:db8::/31", "2001:db8::/32", false},
      {"2001:db8::/32", "0.0.0.0/0", false},
      {"1.2.3.4", "::/0", false},
      /* Ports: none stands for 80 and 443. */
      {"example.com:443", "example.com", true},
      {"example.com:80", "example.com", true},
      {"example.com:8080", "example.com", false},
      {"example.com", "example.com:443", false},
      {"example.com:443", "example.com:443", true},
      {"example.com:8080", "example.com:8080", true},
      {"example.com:8080", "example.com:8081", false},
      {"*:443", "*", true},
      {"a.example.com:443", "*.example.com:443", true},
      {"a.example.com:80", "*.example.com:443", false},
      {"10.0.0.0/8:443", "0.0.0.0/0", true},
      {"10.0.0.0/8", "0.0.0.0/0:443", false},
      {"[2001:db8::1]:443", "[2001:db8::/32]:443", true},
      {"[2001:db8::1]:8443", "2001:db8::/32", false},
  };
  (void)state;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    struct egress_allow_entry e = parse_ok(cases[i].entry), c = parse_ok(cases[i].ceiling);
    if (egress_allow_entry_within(&e, &c) != cases[i].within)
      fail_msg("'%s' within '%s': want %s", cases[i].entry, cases[i].ceiling,
               cases[i].within ? "true" : "false");
  }
  struct egress_allow_entry e = parse_ok("example.com");
  assert_false(egress_allow_entry_within(NULL, &e));
  assert_false(egress_allow_entry_within(&e, NULL));
}

static void test_within_list(void **state) {
  (void)state;
  struct egress_allow ceiling = LIST("example.com:443", "*.pypi.org", "10.0.0.0/8");
  struct egress_allow_entry e;
  e = parse_ok("example.com:443");
  assert_true(egress_allow_within(&e, &ceiling));
  e = parse_ok("example.com");
  assert_false(egress_allow_within(&e, &ceiling));
  e = parse_ok("files.pypi.org");
  assert_true(egress_allow_within(&e, &ceiling));
  e = parse_ok("pypi.org");
  assert_false(egress_allow_within(&e, &ceiling));
  e = parse_ok("10.2.0.0/16:5432");
  assert_false(egress_allow_within(&e, &ceiling));
  e = parse_ok("10.2.0.0/16");
  assert_true(egress_allow_within(&e, &ceiling));
  struct egress_allow empty = {0};
  assert_false(egress_allow_within(&e, &empty));
  assert_false(egress_allow_within(&e, NULL));
  assert_false(egress_allow_within(NULL, &ceiling));
}

static void test_target(void **state) {
  (void)state;
  struct egress_allow l = LIST("example.com", "*.example.org", "198.51.100.0/24:8080",
                               "[2001:db8::/32]:443", "files.test:8443", "any.test:*");
  static const struct {
    const char *host;
    uint16_t port;
    bool allowed;
  } cases[] = {
      {"example.com", 443, true},
      {"example.com", 80, true},
      {"any.test", 1, true},
      {"any.test", 65535, true},
      {"any.test", 0, false},
      {"EXAMPLE.COM", 443, true},
      {"example.com", 8080, false},
      {"example.com", 0, false},
      {"www.example.com", 443, false},
      {"example.org", 443, false}, /* "*.example.org" is below it only */
      {"a.example.org", 443, true},
      {"a.b.example.org", 443, true},
      {"A.B.Example.Org", 80, true},
      {"badexample.org", 443, false},
      {"files.test", 8443, true},
      {"files.test", 443, false},
      {"198.51.100.7", 8080, true},
      {"198.51.100.7", 443, false},
      {"198.51.101.7", 8080, false},
      {"2001:db8::1", 443, true},
      {"2001:DB8::1", 443, true},
      {"2001:db8::1", 80, false},
      {"2001:db9::1", 443, false},
      {"::ffff:198.51.100.7", 8080, true}, /* judged as the IPv4 address it carries */
      {"[2001:db8::1]", 443, false},       /* brackets are the caller's to take off */
      /* Neither a name nor an IP literal. */
      {"", 443, false},
      {"example.com.", 443, false},
      {"ex ample.com", 443, false},
      {"*.example.org", 443, false},
      {"-a.example.org", 443, false},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    if (egress_allow_target(&l, cases[i].host, cases[i].port) != cases[i].allowed)
      fail_msg("target %s port %u: want %s", cases[i].host, (unsigned)cases[i].port,
               cases[i].allowed ? "allowed" : "refused");

  /* A name matches name entries only, an IP literal CIDR entries only. */
  struct egress_allow any = LIST("*"), all = LIST("0.0.0.0/0", "::/0");
  assert_true(egress_allow_target(&any, "example.com", 443));
  assert_false(egress_allow_target(&any, "1.2.3.4", 443));
  assert_false(egress_allow_target(&any, "::1", 443));
  assert_false(egress_allow_target(&all, "example.com", 443));
  assert_true(egress_allow_target(&all, "1.2.3.4", 443));
  assert_true(egress_allow_target(&all, "::1", 443));
  /* What getaddrinfo reads as an address is neither a name nor a literal. */
  assert_false(egress_allow_target(&any, "127.1", 443));
  assert_false(egress_allow_target(&any, "2130706433", 443));
  assert_false(egress_allow_target(&any, "0x7f.0.0.1", 443));
  assert_false(egress_allow_target(&all, "127.1", 443));
  assert_false(egress_allow_target(&all, "0x7f.0.0.1", 443));
  assert_false(egress_allow_target(NULL, "example.com", 443));
  assert_false(egress_allow_target(&any, NULL, 443));

  /* A host of 253 bytes is a name; one of 254 is not. */
  char host[300];
  fill(host, 253, 'b');
  struct egress_allow one = {0};
  one.e[0] = parse_ok(host);
  one.n = 1;
  assert_true(egress_allow_target(&one, host, 443));
  assert_true(egress_allow_target(&any, host, 443));
  fill(host, 254, 'b');
  assert_false(egress_allow_target(&any, host, 443));
}

static struct sockaddr_storage sockaddr_of(const char *text, socklen_t *len) {
  struct sockaddr_storage ss;
  memset(&ss, 0, sizeof ss);
  if (strchr(text, ':') != NULL) {
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
    in6->sin6_family = AF_INET6;
    assert_int_equal(inet_pton(AF_INET6, text, &in6->sin6_addr), 1);
    *len = sizeof *in6;
  } else {
    struct sockaddr_in *in = (struct sockaddr_in *)&ss;
    in->sin_family = AF_INET;
    assert_int_equal(inet_pton(AF_INET, text, &in->sin_addr), 1);
    *len = sizeof *in;
  }
  return ss;
}

static bool address_allowed(const struct egress_allow *l, const char *text, uint16_t port) {
  socklen_t len;
  struct sockaddr_storage ss = sockaddr_of(text, &len);
  return egress_allow_address(l, (struct sockaddr *)&ss, len, port);
}

static void test_address(void **state) {
  (void)state;
  struct egress_allow l = LIST("198.51.100.0/24", "10.0.0.0/8:5432", "2001:db8::/32", "*");
  static const struct {
    const char *addr;
    uint16_t port;
    bool allowed;
  } cases[] = {
      {"198.51.100.7", 443, true},
      {"198.51.100.7", 80, true},
      {"198.51.100.7", 8080, false},
      {"198.51.100.7", 0, false},
      {"10.1.2.3", 5432, true},
      {"10.1.2.3", 443, false},
      {"192.0.2.1", 443, false}, /* "*" is for names: it allows no address */
      {"2001:db8::5", 443, true},
      {"2001:db9::5", 443, false},
      /* IPv4-mapped: judged as the IPv4 address it carries. */
      {"::ffff:198.51.100.7", 443, true},
      {"::ffff:10.1.2.3", 5432, true},
      {"::ffff:10.1.2.3", 443, false},
      {"::ffff:192.0.2.1", 443, false},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    if (address_allowed(&l, cases[i].addr, cases[i].port) != cases[i].allowed)
      fail_msg("address %s port %u: want %s", cases[i].addr, (unsigned)cases[i].port,
               cases[i].allowed ? "allowed" : "refused");

  /* An IPv6 CIDR does not take in IPv4-mapped addresses; an IPv4 one does. */
  struct egress_allow v6 = LIST("::/0"), v4 = LIST("0.0.0.0/0");
  assert_false(address_allowed(&v6, "::ffff:127.0.0.1", 443));
  assert_true(address_allowed(&v4, "::ffff:127.0.0.1", 443));
  assert_true(address_allowed(&v6, "::1", 443));
  assert_false(address_allowed(&v4, "::1", 443));

  /* Short or foreign socket addresses. */
  socklen_t len;
  struct sockaddr_storage ss = sockaddr_of("198.51.100.7", &len);
  assert_false(egress_allow_address(&l, (struct sockaddr *)&ss, len - 1, 443));
  ss = sockaddr_of("2001:db8::5", &len);
  assert_false(egress_allow_address(&l, (struct sockaddr *)&ss, len - 1, 443));
  struct sockaddr_un un = {.sun_family = AF_UNIX};
  assert_false(egress_allow_address(&v4, (struct sockaddr *)&un, sizeof un, 443));
  assert_false(egress_allow_address(&v4, NULL, 0, 443));
  assert_false(egress_allow_address(NULL, (struct sockaddr *)&ss, len, 443));
}

/* EGRESS_ALLOW_MAX entries are all read; an n past it reads no further. */
static void test_list_max(void **state) {
  (void)state;
  struct {
    struct egress_allow l;
    struct egress_allow_entry past; /* right after l.e[] */
  } s;
  memset(&s, 0, sizeof s);
  for (size_t i = 0; i < EGRESS_ALLOW_MAX - 1; i++)
    s.l.e[i] = parse_ok("other.test");
  s.l.e[EGRESS_ALLOW_MAX - 1] = parse_ok("last.test");
  s.l.n = EGRESS_ALLOW_MAX;
  struct egress_allow_entry e = parse_ok("last.test");
  assert_true(egress_allow_within(&e, &s.l));
  assert_true(egress_allow_target(&s.l, "last.test", 443));
  s.l.e[EGRESS_ALLOW_MAX - 1] = parse_ok("192.0.2.0/24");
  assert_true(address_allowed(&s.l, "192.0.2.1", 443));

  assert_int_equal(offsetof(__typeof__(s), past),
                   offsetof(__typeof__(s), l.e) + sizeof s.l.e); /* no padding between */
  s.l.e[EGRESS_ALLOW_MAX - 1] = parse_ok("other.test");
  s.past = parse_ok("last.test");
  s.l.n = EGRESS_ALLOW_MAX + 1;
  assert_false(egress_allow_within(&e, &s.l));
  assert_false(egress_allow_target(&s.l, "last.test", 443));
  s.past = parse_ok("192.0.2.0/24");
  assert_false(address_allowed(&s.l, "192.0.2.1", 443));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_parse_names),   cmocka_unit_test(test_parse_addresses),
      cmocka_unit_test(test_parse_refused), cmocka_unit_test(test_parse_refused_leaves_output),
      cmocka_unit_test(test_parse_lengths), cmocka_unit_test(test_format_round_trip),
      cmocka_unit_test(test_within),        cmocka_unit_test(test_within_list),
      cmocka_unit_test(test_target),        cmocka_unit_test(test_address),
      cmocka_unit_test(test_list_max),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
