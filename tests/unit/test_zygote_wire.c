/* The zygote's run codec (server/sandbox/zygote_wire.c): what the engine
 * packs comes back whole, the memfd is sealed, and a packed run that does
 * not add up (a bad magic, an offset past the string area, a string
 * without its NUL, a size that is not the arrays' sum) is refused with
 * EBADMSG. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "zygote_wire.h"

static const char *const argv_in[] = {"/usr/bin/python3", "-u", "/workspace/main.py", NULL};
static const char *const env_in[] = {"PATH=/usr/bin", "HOME=/workspace", NULL};

static void fill_args(struct child_args *a, struct child_op *ops) {
  ops[0] = (struct child_op){.kind = CHILD_OP_MKDIR, .path = "/tmp", .mode = 01777};
  ops[1] = (struct child_op){.kind = CHILD_OP_ATTACH, .source = "/srv/ws", .path = "/workspace"};
  *a = (struct child_args){.ops = ops,
                           .n_ops = 2,
                           .cwd = "/workspace",
                           .hostname = "sandbox",
                           .argv = argv_in,
                           .envp = env_in};
  a->rlimits[0].resource = RLIMIT_NOFILE;
  a->rlimits[0].limit.rlim_cur = 64;
  a->rlimits[0].limit.rlim_max = 128;
  a->n_rlimits = 1;
}

/* The packed bytes of a (to tamper with). */
static uint8_t *packed(size_t *len) {
  struct child_op ops[2];
  struct child_args a;
  fill_args(&a, ops);
  int fd = zygote_wire_pack(&a);
  assert_true(fd >= 0);
  struct stat st;
  assert_int_equal(fstat(fd, &st), 0);
  *len = (size_t)st.st_size;
  uint8_t *buf = malloc(*len);
  assert_non_null(buf);
  assert_int_equal(pread(fd, buf, *len, 0), (ssize_t)*len);
  close(fd);
  return buf;
}

static int memfd_of(const uint8_t *data, size_t len) {
  int fd = memfd_create("test-zygote-wire", MFD_CLOEXEC);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, data, len), (ssize_t)len);
  return fd;
}

static void test_round_trip(void **state) {
  (void)state;
  struct child_op ops[2];
  struct child_args a;
  fill_args(&a, ops);
  int fd = zygote_wire_pack(&a);
  assert_true(fd >= 0);
  /* Sealed: nobody writes the run after the engine packed it. */
  assert_int_equal(fcntl(fd, F_GET_SEALS) & (F_SEAL_WRITE | F_SEAL_SEAL),
                   F_SEAL_WRITE | F_SEAL_SEAL);
  struct zygote_run run;
  assert_int_equal(zygote_wire_unpack(fd, &run), 0);
  close(fd);
  assert_int_equal(run.n_ops, 2);
  assert_int_equal(run.ops[0].kind, CHILD_OP_MKDIR);
  assert_string_equal(run.ops[0].path, "/tmp");
  assert_int_equal(run.ops[0].mode, 01777);
  assert_null(run.ops[0].source);
  assert_int_equal(run.ops[1].kind, CHILD_OP_ATTACH);
  assert_string_equal(run.ops[1].source, "/srv/ws");
  assert_int_equal(run.n_trees, 1);
  for (size_t i = 0; argv_in[i] != NULL; i++)
    assert_string_equal(run.argv[i], argv_in[i]);
  assert_null(run.argv[3]);
  assert_string_equal(run.envp[0], env_in[0]);
  assert_string_equal(run.envp[1], env_in[1]);
  assert_null(run.envp[2]);
  assert_string_equal(run.cwd, "/workspace");
  assert_string_equal(run.hostname, "sandbox");
  assert_int_equal(run.n_rlimits, 1);
  assert_int_equal(run.rlimits[0].resource, RLIMIT_NOFILE);
  assert_int_equal(run.rlimits[0].limit.rlim_cur, 64);
  assert_int_equal(run.rlimits[0].limit.rlim_max, 128);
  free(run.ops);
  free(run.argv);
  free(run.envp);
}

/* Unpacks data, expecting EBADMSG. */
static void assert_refused(const uint8_t *data, size_t len) {
  int fd = memfd_of(data, len);
  struct zygote_run run;
  errno = 0;
  assert_int_equal(zygote_wire_unpack(fd, &run), -1);
  assert_int_equal(errno, EBADMSG);
  close(fd);
  free(run.ops);
  free(run.argv);
  free(run.envp);
}

static void test_bad_magic(void **state) {
  (void)state;
  size_t len;
  uint8_t *buf = packed(&len);
  buf[0] ^= 0xff;
  assert_refused(buf, len);
  free(buf);
}

static void test_size_not_the_sum(void **state) {
  (void)state;
  size_t len;
  uint8_t *buf = packed(&len);
  assert_refused(buf, len - 1); /* the string area one byte short */
  uint8_t *longer = calloc(1, len + 1);
  assert_non_null(longer);
  memcpy(longer, buf, len);
  assert_refused(longer, len + 1); /* a byte past it */
  free(longer);
  free(buf);
}

static void test_string_offset_out_of_area(void **state) {
  (void)state;
  size_t len;
  uint8_t *buf = packed(&len);
  /* The header's cwd offset (after magic and four counts) past the area. */
  uint32_t off = UINT32_MAX - 1;
  memcpy(buf + 5 * sizeof(uint32_t), &off, sizeof off);
  assert_refused(buf, len);
  free(buf);
}

static void test_string_without_nul(void **state) {
  (void)state;
  size_t len;
  uint8_t *buf = packed(&len);
  buf[len - 1] = 'x'; /* the last string's NUL */
  assert_refused(buf, len);
  free(buf);
}

static void test_too_short_for_a_header(void **state) {
  (void)state;
  uint8_t tiny[4] = {0};
  assert_refused(tiny, sizeof tiny);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_round_trip),         cmocka_unit_test(test_bad_magic),
      cmocka_unit_test(test_size_not_the_sum),   cmocka_unit_test(test_string_offset_out_of_area),
      cmocka_unit_test(test_string_without_nul), cmocka_unit_test(test_too_short_for_a_header),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
