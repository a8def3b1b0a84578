/* Unit tests: the server name of a TLS ClientHello (egress_tls.c), which
 * the egress proxy reads from the first bytes of a CONNECT tunnel. Real
 * hellos (openssl s_client, Python's ssl; tests/unit/tls_hellos.h, written
 * by make_tls_hellos.py), every prefix of them, the same split over
 * records; then hellos built here with each length field lying past its
 * bound, the size limit, and server names that are not DNS names. Each
 * input is copied to a buffer of exactly its length, so that a build with
 * ASan (SANDBOXD_SANITIZE) sees any read past it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "egress_tls.h"
#include "tls_hellos.h"

static char sni[256];
static char why[256];

static enum egress_tls_sni check(const uint8_t *b, size_t n) {
  uint8_t *copy = malloc(n > 0 ? n : 1);
  assert_non_null(copy);
  if (n > 0)
    memcpy(copy, b, n);
  enum egress_tls_sni r = egress_tls_sni(copy, n, sni, sizeof sni, why, sizeof why);
  free(copy);
  return r;
}

static void all_prefixes_more(const uint8_t *b, size_t n) {
  for (size_t i = 0; i < n; i++) {
    enum egress_tls_sni r = check(b, i);
    if (r != EGRESS_TLS_MORE)
      fail_msg("prefix of %zu of %zu bytes: %d (%s)", i, n, r, why);
  }
}

/* Puts the handshake message of a one-record hello (hello + 5, its record
 * header's length) into records of the given sizes; returns the length. */
static size_t split(const uint8_t *hello, size_t len, const size_t *sizes, size_t n_sizes,
                    uint8_t *out) {
  const uint8_t *msg = hello + 5;
  size_t msg_len = len - 5, off = 0, o = 0;
  for (size_t i = 0; i < n_sizes && off < msg_len; i++) {
    size_t k = i + 1 == n_sizes || sizes[i] > msg_len - off ? msg_len - off : sizes[i];
    memcpy(out + o, hello, 3);
    out[o + 3] = (uint8_t)(k >> 8);
    out[o + 4] = (uint8_t)k;
    memcpy(out + o + 5, msg + off, k);
    o += 5 + k;
    off += k;
  }
  return o;
}

static void test_real_hellos(void **state) {
  (void)state;
  assert_int_equal(check(hello_openssl, sizeof hello_openssl), EGRESS_TLS_SNI);
  assert_string_equal(sni, "a.test");
  assert_int_equal(check(hello_python, sizeof hello_python), EGRESS_TLS_SNI);
  assert_string_equal(sni, "a.test");
  assert_int_equal(check(hello_python_no_sni, sizeof hello_python_no_sni), EGRESS_TLS_NO_SNI);
  assert_string_equal(sni, "");
  /* Bytes after the hello (a client sending early data) change nothing. */
  uint8_t more[sizeof hello_openssl + 7];
  memcpy(more, hello_openssl, sizeof hello_openssl);
  memcpy(more + sizeof hello_openssl, "\x17\x03\x03\x00\x02xy", 7);
  assert_int_equal(check(more, sizeof more), EGRESS_TLS_SNI);
  assert_string_equal(sni, "a.test");
}

static void test_every_prefix_is_more(void **state) {
  (void)state;
  all_prefixes_more(hello_openssl, sizeof hello_openssl);
  all_prefixes_more(hello_python, sizeof hello_python);
  all_prefixes_more(hello_python_no_sni, sizeof hello_python_no_sni);
}

static void test_split_across_records(void **state) {
  (void)state;
  uint8_t out[2048];
  const size_t halves[] = {150, 0};
  size_t n = split(hello_openssl, sizeof hello_openssl, halves, 2, out);
  assert_int_equal(n, sizeof hello_openssl + 5);
  assert_int_equal(check(out, n), EGRESS_TLS_SNI);
  assert_string_equal(sni, "a.test");
  all_prefixes_more(out, n);
  /* Records that cut the handshake header itself, and one byte records. */
  const size_t small[] = {1, 2, 1, 1, 1, 3, 0};
  n = split(hello_python, sizeof hello_python, small, 7, out);
  assert_int_equal(check(out, n), EGRESS_TLS_SNI);
  assert_string_equal(sni, "a.test");
  all_prefixes_more(out, n);
  /* A record of another type inside the hello: the alert after 150 bytes. */
  n = split(hello_openssl, sizeof hello_openssl, halves, 2, out);
  out[5 + 150] = 21;
  assert_int_equal(check(out, n), EGRESS_TLS_MALFORMED);
  assert_int_equal(check(out, 5 + 150 + 1), EGRESS_TLS_MALFORMED);
  assert_int_equal(check(out, 5 + 150), EGRESS_TLS_MORE);
}

static void test_not_tls(void **state) {
  (void)state;
  assert_int_equal(check((const uint8_t *)"GET / HTTP/1.1\r\n", 16), EGRESS_TLS_NOT_TLS);
  assert_int_equal(check((const uint8_t *)"G", 1), EGRESS_TLS_NOT_TLS);
  assert_int_equal(check((const uint8_t *)"SSH-2.0-OpenSSH_9.2\r\n", 21), EGRESS_TLS_NOT_TLS);
  /* An SSLv2-style hello, and an alert record. */
  assert_int_equal(check((const uint8_t *)"\x80\x2e\x01\x03\x01", 5), EGRESS_TLS_NOT_TLS);
  assert_int_equal(check((const uint8_t *)"\x15\x03\x03\x00\x02", 5), EGRESS_TLS_NOT_TLS);
  assert_int_equal(check((const uint8_t *)"", 0), EGRESS_TLS_MORE);
  assert_int_equal(check((const uint8_t *)"\x16", 1), EGRESS_TLS_MORE);
}

/* A hello built here: one record; session_id of 32, one cipher suite,
 * compression null; then the extensions block (ext, or none at all). */
enum {
  OFF_RECORD_VERSION = 1,
  OFF_RECORD_LEN = 3,
  OFF_HS_TYPE = 5,
  OFF_HS_LEN = 6,
  OFF_VERSION = 9,
  OFF_SID_LEN = 43,
  OFF_CS_LEN = 76,
  OFF_CM_LEN = 80,
  OFF_EXT_LEN = 82,
  OFF_EXT = 84,
};

static void put16(uint8_t *p, size_t v) {
  p[0] = (uint8_t)(v >> 8);
  p[1] = (uint8_t)v;
}

static size_t build(uint8_t *out, const uint8_t *ext, size_t ext_len, int with_ext_block) {
  size_t o = 5;
  out[o++] = 1;
  o += 3; /* handshake length, below */
  out[o++] = 3;
  out[o++] = 3;
  memset(out + o, 0xab, 32); /* random */
  o += 32;
  out[o++] = 32;
  memset(out + o, 0xcd, 32); /* session_id */
  o += 32;
  put16(out + o, 2);
  out[o + 2] = 0x13;
  out[o + 3] = 0x01;
  o += 4;
  out[o++] = 1;
  out[o++] = 0;
  if (with_ext_block) {
    put16(out + o, ext_len);
    o += 2;
    if (ext_len > 0)
      memcpy(out + o, ext, ext_len);
    o += ext_len;
  }
  size_t body = o - 9;
  out[0] = 22;
  out[1] = 3;
  out[2] = 1;
  put16(out + 3, o - 5);
  out[6] = (uint8_t)(body >> 16);
  put16(out + 7, body);
  return o;
}

/* A server_name extension naming name (n bytes). */
static size_t sni_ext(uint8_t *out, const char *name, size_t n) {
  put16(out, 0);
  put16(out + 2, n + 5);
  put16(out + 4, n + 3);
  out[6] = 0;
  put16(out + 7, n);
  memcpy(out + 9, name, n);
  return n + 9;
}

static enum egress_tls_sni with_name(const char *name, size_t n) {
  uint8_t ext[600], hello[1024];
  size_t e = sni_ext(ext, name, n);
  size_t h = build(hello, ext, e, 1);
  return check(hello, h);
}

static void test_built_hello(void **state) {
  (void)state;
  uint8_t ext[600], hello[1024];
  /* Another extension first (supported_versions), then server_name. */
  memcpy(ext, "\x00\x2b\x00\x03\x02\x03\x04", 7);
  size_t e = 7 + sni_ext(ext + 7, "Pypi.ORG", 8);
  size_t h = build(hello, ext, e, 1);
  assert_int_equal(check(hello, h), EGRESS_TLS_SNI);
  assert_string_equal(sni, "pypi.org"); /* lower case */
  all_prefixes_more(hello, h);
  /* No extensions block at all (TLS 1.2 allows it); an empty one. */
  h = build(hello, NULL, 0, 0);
  assert_int_equal(check(hello, h), EGRESS_TLS_NO_SNI);
  all_prefixes_more(hello, h);
  h = build(hello, NULL, 0, 1);
  assert_int_equal(check(hello, h), EGRESS_TLS_NO_SNI);
  /* A session_id of 0 bytes (TLS 1.2 clients without a session). */
  h = build(hello, ext, e, 1);
  hello[OFF_SID_LEN] = 0;
  memmove(hello + OFF_SID_LEN + 1, hello + OFF_SID_LEN + 33, h - OFF_SID_LEN - 33);
  h -= 32;
  put16(hello + OFF_RECORD_LEN, h - 5);
  put16(hello + OFF_HS_LEN + 1, h - 9);
  assert_int_equal(check(hello, h), EGRESS_TLS_SNI);
  assert_string_equal(sni, "pypi.org");
  /* Record versions 3.1 to 3.4 all carry a hello. */
  h = build(hello, ext, e, 1);
  for (uint8_t minor = 1; minor <= 4; minor++) {
    hello[OFF_RECORD_VERSION + 1] = minor;
    assert_int_equal(check(hello, h), EGRESS_TLS_SNI);
  }
}

/* The built hello with one byte at off set to v: MALFORMED, also as soon
 * as that byte has arrived (when early is set), not only when all have. */
static void malformed_with(size_t off, uint8_t v, int early) {
  uint8_t ext[64], hello[256];
  size_t e = sni_ext(ext, "a.test", 6);
  size_t h = build(hello, ext, e, 1);
  hello[off] = v;
  enum egress_tls_sni r = check(hello, h);
  if (r != EGRESS_TLS_MALFORMED)
    fail_msg("byte %zu set to %u: %d, not MALFORMED", off, v, r);
  if (early && (r = check(hello, off + 2)) != EGRESS_TLS_MALFORMED)
    fail_msg("byte %zu set to %u, %zu bytes: %d, not MALFORMED", off, v, off + 2, r);
}

static void test_fields_refused(void **state) {
  (void)state;
  malformed_with(OFF_RECORD_VERSION, 2, 1);     /* record version 2.x */
  malformed_with(OFF_RECORD_VERSION + 1, 0, 1); /* SSL 3.0 */
  malformed_with(OFF_RECORD_VERSION + 1, 5, 1);
  malformed_with(OFF_HS_TYPE, 2, 1); /* a ServerHello */
  malformed_with(OFF_VERSION, 2, 1); /* legacy_version */
  malformed_with(OFF_VERSION + 1, 0, 0);
  malformed_with(OFF_SID_LEN, 33, 1);      /* session_id over 32 */
  malformed_with(OFF_CS_LEN + 1, 3, 1);    /* cipher_suites odd */
  malformed_with(OFF_CS_LEN + 1, 0, 1);    /* no cipher suite */
  malformed_with(OFF_CM_LEN, 0, 1);        /* no compression method */
  malformed_with(OFF_EXT + 6, 1, 0);       /* name_type 1, not host_name */
  malformed_with(OFF_RECORD_LEN, 0x40, 1); /* a record over 16384 bytes */
  /* A record of 0 bytes. */
  uint8_t z[] = {22, 3, 1, 0, 0, 1};
  assert_int_equal(check(z, sizeof z), EGRESS_TLS_MALFORMED);
  assert_int_equal(check(z, 5), EGRESS_TLS_MALFORMED);
}

/* Each length field claiming more than the field that holds it has: the
 * built hello with the field at off raised by one. */
static void test_lengths_lying(void **state) {
  (void)state;
  uint8_t ext[64], hello[256];
  size_t e = sni_ext(ext, "a.test", 6);
  size_t h = build(hello, ext, e, 1);
  const struct {
    size_t off;
    int wide; /* 2 bytes, else 1 */
    const char *what;
  } fields[] = {
      {OFF_SID_LEN, 0, "session_id"},
      {OFF_CS_LEN, 1, "cipher_suites"},
      {OFF_CM_LEN, 0, "compression_methods"},
      {OFF_EXT_LEN, 1, "extensions"},
      {OFF_EXT + 2, 1, "server_name extension"},
      {OFF_EXT + 4, 1, "server_name list"},
      {OFF_EXT + 7, 1, "host_name"},
  };
  for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
    for (int delta = -1; delta <= 1; delta += 2) {
      uint8_t lie[256];
      memcpy(lie, hello, h);
      size_t off = fields[i].off;
      if (fields[i].wide)
        put16(lie + off, (size_t)((lie[off] << 8 | lie[off + 1]) + delta));
      else
        lie[off] = (uint8_t)(lie[off] + delta);
      enum egress_tls_sni r = check(lie, h);
      if (r != EGRESS_TLS_MALFORMED)
        fail_msg("%s length %+d: %d, not MALFORMED", fields[i].what, delta, r);
    }
  }
  /* The handshake length one short of, or one past, what its fields add
   * up to: the extensions no longer end where the hello does. */
  hello[OFF_HS_LEN + 2]--;
  assert_int_equal(check(hello, h), EGRESS_TLS_MALFORMED);
  hello[OFF_HS_LEN + 2] += 2;
  assert_int_equal(check(hello, h), EGRESS_TLS_MALFORMED);
  /* Without extensions, two past is a prefix (an empty extensions block
   * may follow, in this record or another); one past is not. */
  h = build(hello, NULL, 0, 0);
  hello[OFF_HS_LEN + 2]++;
  assert_int_equal(check(hello, h), EGRESS_TLS_MALFORMED);
  hello[OFF_HS_LEN + 2]++;
  assert_int_equal(check(hello, h), EGRESS_TLS_MORE);
}

static void test_duplicate_server_name(void **state) {
  (void)state;
  uint8_t ext[128], hello[256];
  size_t e = sni_ext(ext, "a.test", 6);
  e += sni_ext(ext + e, "b.test", 6);
  size_t h = build(hello, ext, e, 1);
  assert_int_equal(check(hello, h), EGRESS_TLS_MALFORMED);
  assert_non_null(strstr(why, "more than one server_name"));
  /* Two host_names in one list. */
  e = sni_ext(ext, "a.test", 6);
  ext[e] = 0;
  put16(ext + e + 1, 6);
  memcpy(ext + e + 3, "b.test", 6);
  put16(ext + 2, 5 + 6 + 9);
  put16(ext + 4, 3 + 6 + 9);
  h = build(hello, ext, e + 9, 1);
  assert_int_equal(check(hello, h), EGRESS_TLS_MALFORMED);
  assert_non_null(strstr(why, "more than one host_name"));
  /* An empty list. */
  memcpy(ext, "\x00\x00\x00\x02\x00\x00", 6);
  h = build(hello, ext, 6, 1);
  assert_int_equal(check(hello, h), EGRESS_TLS_MALFORMED);
}

static void test_server_names(void **state) {
  (void)state;
  char name[300];
  assert_int_equal(with_name("a_b-c.example", 13), EGRESS_TLS_SNI);
  assert_string_equal(sni, "a_b-c.example");
  assert_int_equal(with_name("1.2.3.4", 7), EGRESS_TLS_SNI);
  const char *bad[] = {"a..test", ".a.test", "a.test.",       "a test",
                       "a/test",  "a:443",   "\xc3\xa9.test", "."};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    if (with_name(bad[i], strlen(bad[i])) != EGRESS_TLS_MALFORMED)
      fail_msg("server name \"%s\" taken", bad[i]);
    assert_non_null(strstr(why, "not a DNS name"));
  }
  assert_int_equal(with_name("a\0b", 3), EGRESS_TLS_MALFORMED);
  assert_int_equal(with_name("", 0), EGRESS_TLS_MALFORMED);
  /* 253 bytes in labels of 63: taken; 254, or a label of 64: refused. */
  memset(name, 'x', sizeof name);
  for (size_t i = 63; i < 253; i += 64)
    name[i] = '.';
  assert_int_equal(with_name(name, 253), EGRESS_TLS_SNI);
  assert_int_equal(strlen(sni), 253);
  name[253] = 'y';
  assert_int_equal(with_name(name, 254), EGRESS_TLS_MALFORMED);
  memset(name, 'x', 64);
  memcpy(name + 64, ".test", 5);
  assert_int_equal(with_name(name, 69), EGRESS_TLS_MALFORMED);
  assert_int_equal(with_name(name + 1, 68), EGRESS_TLS_SNI);
  /* No room for the name in the caller's buffer: refused, not cut. */
  uint8_t ext[64], hello[256];
  size_t h = build(hello, ext, sni_ext(ext, "a.test", 6), 1);
  char small[6];
  assert_int_equal(egress_tls_sni(hello, h, small, sizeof small, NULL, 0), EGRESS_TLS_MALFORMED);
  char big[7];
  assert_int_equal(egress_tls_sni(hello, h, big, sizeof big, NULL, 0), EGRESS_TLS_SNI);
}

/* A hello of exactly wire bytes on the wire (one record unless records of
 * rec bytes are asked for), grown with a padding extension (21) before its
 * server_name. */
static size_t padded(uint8_t *out, size_t wire, size_t rec) {
  static uint8_t ext[EGRESS_TLS_HELLO_MAX + 64], one[EGRESS_TLS_HELLO_MAX + 64];
  size_t base = build(one, NULL, 0, 1) + 4 + 15; /* + padding header + server_name "a.test" */
  size_t pad = wire - base;
  put16(ext, 21);
  put16(ext + 2, pad);
  memset(ext + 4, 0, pad);
  size_t e = 4 + pad + sni_ext(ext + 4 + pad, "a.test", 6);
  size_t n = build(one, ext, e, 1);
  assert_int_equal(n, wire);
  if (rec == 0) {
    memcpy(out, one, n);
    return n;
  }
  static size_t sizes[EGRESS_TLS_HELLO_MAX];
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
    sizes[i] = rec;
  return split(one, n, sizes, sizeof sizes / sizeof sizes[0], out);
}

static void test_size_limit(void **state) {
  (void)state;
  static uint8_t buf[2 * EGRESS_TLS_HELLO_MAX];
  size_t n = padded(buf, EGRESS_TLS_HELLO_MAX, 0);
  assert_int_equal(check(buf, n), EGRESS_TLS_SNI);
  assert_string_equal(sni, "a.test");
  assert_int_equal(check(buf, n - 1), EGRESS_TLS_MORE);
  /* One byte more: refused from its first 9 bytes, as the length says. */
  n = padded(buf, EGRESS_TLS_HELLO_MAX + 1, 0);
  assert_int_equal(check(buf, n), EGRESS_TLS_MALFORMED);
  assert_non_null(strstr(why, "larger than 16384"));
  assert_int_equal(check(buf, 9), EGRESS_TLS_MALFORMED);
  assert_int_equal(check(buf, 8), EGRESS_TLS_MORE);
  /* A handshake length of 16 MiB. */
  memcpy(buf, "\x16\x03\x01\x00\x10\x01\xff\xff\xff", 9);
  assert_int_equal(check(buf, 9), EGRESS_TLS_MALFORMED);
  /* Records of 1000 bytes: the same hello no longer fits with its record
   * headers, and the proxy, having read 16384 bytes, is told so. */
  n = padded(buf, EGRESS_TLS_HELLO_MAX, 1000);
  assert_true(n > EGRESS_TLS_HELLO_MAX);
  assert_int_equal(check(buf, n), EGRESS_TLS_MALFORMED);
  assert_int_equal(check(buf, EGRESS_TLS_HELLO_MAX), EGRESS_TLS_MALFORMED);
  /* 16384 bytes of anything: never MORE. */
  n = padded(buf, EGRESS_TLS_HELLO_MAX - 16 * 5, 1024);
  assert_true(n <= EGRESS_TLS_HELLO_MAX);
  assert_int_equal(check(buf, n), EGRESS_TLS_SNI);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_real_hellos),          cmocka_unit_test(test_every_prefix_is_more),
      cmocka_unit_test(test_split_across_records), cmocka_unit_test(test_not_tls),
      cmocka_unit_test(test_built_hello),          cmocka_unit_test(test_fields_refused),
      cmocka_unit_test(test_lengths_lying),        cmocka_unit_test(test_duplicate_server_name),
      cmocka_unit_test(test_server_names),         cmocka_unit_test(test_size_limit),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
