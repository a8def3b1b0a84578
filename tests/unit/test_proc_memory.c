/* The smaps_rollup parser (server/sandbox/proc_memory.c): the kernel's own
 * text gives its Rss and Pss in bytes; a text that does not add up (a line
 * missing, repeated, cut before its newline, without its unit, with a sign
 * or a number past 2^64 bytes) is refused rather than read as a figure; a
 * file past PROC_MEMORY_MAX_TEXT is refused, not cut; this process's own
 * file reads. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "proc_memory.h"

/* As Linux 6.1 writes it. */
static const char ROLLUP[] = "55d1c6f4b000-7ffc3b9f5000 ---p 00000000 00:00 0                  "
                             "[rollup]\n"
                             "Rss:              105392 kB\n"
                             "Pss:               52696 kB\n"
                             "Pss_Dirty:         20480 kB\n"
                             "Pss_Anon:          20000 kB\n"
                             "Pss_File:          32696 kB\n"
                             "Pss_Shmem:             0 kB\n"
                             "Shared_Clean:      80000 kB\n"
                             "Private_Dirty:     20000 kB\n"
                             "Anonymous:         20000 kB\n"
                             "Swap:                  0 kB\n"
                             "SwapPss:               0 kB\n"
                             "Locked:                0 kB\n";

static int parse(const char *text, struct proc_memory *m) {
  errno = 0;
  return proc_memory_parse(text, strlen(text), m);
}

static void test_kernel_text(void **state) {
  (void)state;
  struct proc_memory m;
  assert_int_equal(parse(ROLLUP, &m), 0);
  assert_int_equal(m.rss_bytes, 105392ull * 1024);
  assert_int_equal(m.pss_bytes, 52696ull * 1024);
  /* Pss_* lines are other lines, whichever comes first. */
  assert_int_equal(parse("Pss_Anon: 7 kB\nPss: 1 kB\nRss: 2 kB\n", &m), 0);
  assert_int_equal(m.pss_bytes, 1024);
  assert_int_equal(m.rss_bytes, 2048);
  assert_int_equal(parse("Rss: 0 kB\nPss: 0 kB\n", &m), 0);
  assert_int_equal(m.rss_bytes, 0);
  /* The largest number of kB that fits 2^64 bytes. */
  assert_int_equal(parse("Rss: 18014398509481983 kB\nPss: 1 kB\n", &m), 0);
  assert_int_equal(m.rss_bytes, 18014398509481983ull * 1024);
}

static void test_malformed(void **state) {
  (void)state;
  static const struct {
    const char *text;
    int errnum;
  } bad[] = {
      {"", EBADMSG},
      {"Rss: 1 kB\n", EBADMSG},                       /* Pss missing */
      {"Pss: 1 kB\n", EBADMSG},                       /* Rss missing */
      {"Rss: 1 kB\nPss_Anon: 1 kB\n", EBADMSG},       /* only a Pss_ line */
      {"Rss: 1 kB\nPss: 1 kB", EBADMSG},              /* no newline: cut */
      {"Rss: 1 kB\nPss: 1", EBADMSG},                 /* cut in the number */
      {"Rss: 1 kB\nRss: 2 kB\nPss: 1 kB\n", EBADMSG}, /* repeated */
      {"Rss: 1 kB\nPss: 1 kB\nPss: 1 kB\n", EBADMSG},
      {"Rss: 1 MB\nPss: 1 kB\n", EBADMSG},    /* another unit */
      {"Rss: 1\nPss: 1 kB\n", EBADMSG},       /* no unit */
      {"Rss: 1 kB \nPss: 1 kB\n", EBADMSG},   /* trailing space */
      {"Rss: -1 kB\nPss: 1 kB\n", EBADMSG},   /* a sign */
      {"Rss: +1 kB\nPss: 1 kB\n", EBADMSG},   /* a sign */
      {"Rss:  kB\nPss: 1 kB\n", EBADMSG},     /* no number */
      {"Rss:\nPss: 1 kB\n", EBADMSG},         /* nothing */
      {"Rss:1 kB\nPss: 1 kB\n", EBADMSG},     /* no space */
      {"Rss: 0x10 kB\nPss: 1 kB\n", EBADMSG}, /* not decimal */
      {"Rss: 1.5 kB\nPss: 1 kB\n", EBADMSG},
      {"Rss: 1 kB\nPss:\t1 kB\n", EBADMSG},
      {"Rss: 18014398509481984 kB\nPss: 1 kB\n", ERANGE}, /* 2^64 bytes */
      {"Rss: 99999999999999999999999999 kB\nPss: 1 kB\n", ERANGE},
      {"Rss: 1 kB\nPss: 184467440737095516160 kB\n", ERANGE},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    struct proc_memory m = {.rss_bytes = 77, .pss_bytes = 77};
    int rc = parse(bad[i].text, &m);
    if (rc != -1 || errno != bad[i].errnum)
      fail_msg("case %zu (\"%s\"): rc %d errno %d, want -1 and %d", i, bad[i].text, rc, errno,
               bad[i].errnum);
    assert_int_equal(m.rss_bytes, 77); /* untouched */
  }
  /* A NUL starting a line: not the Pss line (so Pss is missing). */
  static const char nul[] = "Rss: 1 kB\n\0Pss: 1 kB\n";
  struct proc_memory m;
  assert_int_equal(proc_memory_parse(nul, sizeof nul - 1, &m), -1);
}

static int memfd_with(const char *text, size_t len) {
  int fd = memfd_create("smaps", MFD_CLOEXEC);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, text, len), (ssize_t)len);
  assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
  return fd;
}

static void test_read_bounded(void **state) {
  (void)state;
  struct proc_memory m;
  int fd = memfd_with(ROLLUP, sizeof ROLLUP - 1);
  assert_int_equal(proc_memory_read_fd(fd, &m), 0);
  assert_int_equal(m.pss_bytes, 52696ull * 1024);
  close(fd);
  /* Exactly the cap: read; one byte more: refused, not cut. */
  char big[PROC_MEMORY_MAX_TEXT + 1];
  memset(big, 'x', sizeof big);
  const char *head = "Rss: 4 kB\nPss: 2 kB\n";
  memcpy(big, head, strlen(head));
  big[PROC_MEMORY_MAX_TEXT - 1] = '\n';
  fd = memfd_with(big, PROC_MEMORY_MAX_TEXT);
  assert_int_equal(proc_memory_read_fd(fd, &m), 0);
  assert_int_equal(m.rss_bytes, 4096);
  close(fd);
  fd = memfd_with(big, PROC_MEMORY_MAX_TEXT + 1);
  errno = 0;
  assert_int_equal(proc_memory_read_fd(fd, &m), -1);
  assert_int_equal(errno, EFBIG);
  close(fd);
  /* Empty: refused. */
  fd = memfd_with("", 0);
  assert_int_equal(proc_memory_read_fd(fd, &m), -1);
  assert_int_equal(errno, EBADMSG);
  close(fd);
}

static void test_own_process(void **state) {
  (void)state;
  int fd = open("/proc/self/smaps_rollup", O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    skip();
  struct proc_memory m;
  assert_int_equal(proc_memory_read_fd(fd, &m), 0);
  close(fd);
  assert_true(m.rss_bytes > 0 && m.rss_bytes % 1024 == 0);
  assert_true(m.pss_bytes > 0 && m.pss_bytes <= m.rss_bytes);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_kernel_text),
      cmocka_unit_test(test_malformed),
      cmocka_unit_test(test_read_bounded),
      cmocka_unit_test(test_own_process),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
