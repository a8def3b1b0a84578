/* Artifact collection and the safe reads behind ListFiles/ReadFile, on a
 * tree built the way a hostile program would: symlinks out and in loops,
 * FIFOs (a blocking open would hang the test), sockets, odd names, deep
 * nesting, files over the caps. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "artifacts.h"
#include "mime.h"
#include "safefs.h"

static char base[64];
static int out_fd = -1;
static struct mime_db mime;

static void put(const char *rel, const char *content, size_t len) {
  char p[512];
  snprintf(p, sizeof(p), "%s/%s", base, rel);
  FILE *f = fopen(p, "w");
  assert_non_null(f);
  assert_int_equal(fwrite(content, 1, len, f), len);
  fclose(f);
}

static void dir(const char *rel) {
  char p[512];
  snprintf(p, sizeof(p), "%s/%s", base, rel);
  assert_int_equal(mkdir(p, 0755), 0);
}

static void link_to(const char *target, const char *rel) {
  char p[512];
  snprintf(p, sizeof(p), "%s/%s", base, rel);
  assert_int_equal(symlink(target, p), 0);
}

static struct sbx_error err;

static int setup(void **state) {
  snprintf(base, sizeof(base), "/tmp/sbx-art-XXXXXX");
  assert_non_null(mkdtemp(base));
  out_fd = open(base, O_RDONLY | O_DIRECTORY);
  assert_true(out_fd >= 0);
  assert_int_equal(mime_db_load(&mime, "/etc/mime.types", NULL), 0);
  return 0;
}

static int teardown(void **state) {
  char cmd[128];
  close(out_fd);
  mime_db_free(&mime);
  snprintf(cmd, sizeof(cmd), "rm -rf %s", base);
  return system(cmd);
}

static const struct artifact *find(const struct artifact_set *set, const char *rel) {
  for (size_t i = 0; i < set->n; i++)
    if (strcmp(set->items[i].relative_path, rel) == 0)
      return &set->items[i];
  return NULL;
}

static void hostile_tree_yields_only_regular_files(void **state) {
  put("plot.png", "\x89PNG", 4);
  dir("sub");
  dir("sub/deeper");
  put("sub/deeper/data.csv", "a,b\n", 4);
  put("with space.txt", "s", 1);
  put("new\nline.txt", "n", 1);
  put("caf\xc3\xa9.txt", "e", 1);
  put("bad\xff.txt", "x", 1); /* not UTF-8: skipped */
  link_to("/etc/shadow", "shadow");
  link_to("/proc/self/environ", "environ");
  link_to("loop2", "loop1");
  link_to("loop1", "loop2");
  link_to("/etc", "etc-dir");
  char p[512];
  snprintf(p, sizeof(p), "%s/fifo", base);
  assert_int_equal(mkfifo(p, 0600), 0);
  int sock = socket(AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/sock", base);
  assert_int_equal(bind(sock, (struct sockaddr *)&sa, sizeof(sa)), 0);

  struct artifact_caps caps = {
      .max_count = 100, .max_depth = 8, .per_file = 1 << 20, .total = 8 << 20};
  struct artifact_set set;
  assert_int_equal(artifacts_collect(out_fd, &caps, &mime, &set, &err), 0);
  close(sock);
  assert_int_equal(set.n, 5);
  const struct artifact *a = find(&set, "plot.png");
  assert_non_null(a);
  assert_string_equal(a->mime, "image/png");
  assert_string_equal(a->name, "plot.png");
  assert_int_equal(a->content_len, 4);
  assert_memory_equal(a->content, "\x89PNG", 4);
  a = find(&set, "sub/deeper/data.csv");
  assert_non_null(a);
  assert_string_equal(a->name, "data.csv");
  assert_string_equal(a->mime, "text/csv");
  assert_non_null(find(&set, "with space.txt"));
  assert_non_null(find(&set, "new\nline.txt"));
  assert_non_null(find(&set, "caf\xc3\xa9.txt"));
  assert_null(find(&set, "shadow"));
  /* 5 symlinks, a FIFO and a socket skipped; one name not UTF-8. */
  assert_int_equal(set.skipped_special, 7);
  assert_int_equal(set.skipped_names, 1);
  /* Sorted by path, directory by directory. */
  for (size_t i = 1; i < set.n; i++)
    assert_true(strcmp(set.items[i - 1].relative_path, set.items[i].relative_path) < 0 ||
                strchr(set.items[i - 1].relative_path, '/') != NULL);
  artifacts_free(&set);
}

static void caps_keep_metadata_and_drop_content(void **state) {
  static char big[3000];
  memset(big, 'b', sizeof(big));
  put("a-big.bin", big, sizeof(big)); /* over per_file */
  put("b-1.txt", big, 600);
  put("c-2.txt", big, 600); /* would pass total */
  put("d-3.txt", big, 100);
  struct artifact_caps caps = {.max_count = 3, .max_depth = 8, .per_file = 1000, .total = 800};
  struct artifact_set set;
  assert_int_equal(artifacts_collect(out_fd, &caps, &mime, &set, &err), 0);
  assert_int_equal(set.n, 3);
  assert_int_equal(set.skipped_count, 1); /* d-3.txt: past max_count */
  const struct artifact *a = find(&set, "a-big.bin");
  assert_true(a->omitted);
  assert_int_equal(a->size, sizeof(big));
  assert_null(a->content);
  assert_false(find(&set, "b-1.txt")->omitted);
  assert_true(find(&set, "c-2.txt")->omitted);
  assert_int_equal(set.omitted_per_file, 1);
  assert_int_equal(set.omitted_total, 1);
  assert_true(set.content_bytes <= 800);
  artifacts_free(&set);
}

static void depth_is_bounded(void **state) {
  char rel[512] = "";
  for (int i = 0; i < 12; i++) {
    strcat(rel, i == 0 ? "d" : "/d");
    dir(rel);
  }
  strcat(rel, "/deep.txt");
  put(rel, "x", 1);
  put("d/shallow.txt", "y", 1);
  struct artifact_caps caps = {.max_count = 100, .max_depth = 4, .per_file = 100, .total = 100};
  struct artifact_set set;
  assert_int_equal(artifacts_collect(out_fd, &caps, &mime, &set, &err), 0);
  assert_int_equal(set.n, 1);
  assert_string_equal(set.items[0].relative_path, "d/shallow.txt");
  assert_int_equal(set.skipped_depth, 1);
  artifacts_free(&set);
}

static void safe_reads_refuse_links_and_fifos(void **state) {
  dir("real");
  put("real/f.txt", "hello world", 11);
  link_to("real", "via-link");
  link_to("/etc/passwd", "passwd");
  char p[512];
  snprintf(p, sizeof(p), "%s/fifo", base);
  assert_int_equal(mkfifo(p, 0600), 0);
  struct stat st;
  int fd = safefs_open_file(out_fd, "real/f.txt", &st, &err);
  assert_true(fd >= 0);
  uint8_t *buf;
  size_t len;
  assert_int_equal(safefs_pread(fd, 6, 100, &buf, &len, &err), 0);
  assert_int_equal(len, 5);
  assert_memory_equal(buf, "world", 5);
  free(buf);
  close(fd);
  assert_int_equal(safefs_open_file(out_fd, "via-link/f.txt", &st, &err), -1);
  assert_int_equal(err.code, SBX_FAILED_PRECONDITION);
  assert_non_null(strstr(err.msg, "symlink"));
  assert_int_equal(safefs_open_file(out_fd, "passwd", &st, &err), -1);
  assert_int_equal(err.code, SBX_FAILED_PRECONDITION);
  assert_non_null(strstr(err.msg, "path passwd: is or goes through a symlink"));
  assert_int_equal(safefs_open_file(out_fd, "fifo", &st, &err), -1); /* and did not block */
  assert_non_null(strstr(err.msg, "not a regular file"));
  assert_int_equal(safefs_open_file(out_fd, "real", &st, &err), -1);
  assert_non_null(strstr(err.msg, "is a directory"));
  assert_int_equal(safefs_open_file(out_fd, "missing", &st, &err), -1);
  assert_int_equal(err.code, SBX_NOT_FOUND);
  assert_int_equal(safefs_open_dir(out_fd, "via-link", &err), -1);
  int d = safefs_open_dir(out_fd, "real", &err);
  assert_true(d >= 0);
  struct safefs_listing l;
  assert_int_equal(safefs_list(out_fd, 100, &l, &err), 0);
  assert_int_equal(l.n, 4);
  assert_string_equal(l.entries[0].name, "fifo");
  assert_int_equal(l.entries[0].type, SAFEFS_OTHER);
  assert_string_equal(l.entries[1].name, "passwd");
  assert_int_equal(l.entries[1].type, SAFEFS_SYMLINK);
  assert_string_equal(l.entries[2].name, "real");
  assert_int_equal(l.entries[2].type, SAFEFS_DIR);
  safefs_listing_free(&l);
  assert_int_equal(safefs_list(out_fd, 2, &l, &err), 0);
  assert_int_equal(l.n, 2);
  assert_true(l.truncated);
  safefs_listing_free(&l);
  close(d);
}

static void mime_types(void **state) {
  assert_string_equal(mime_db_lookup(&mime, "x.PNG"), "image/png");
  assert_string_equal(mime_db_lookup(&mime, "a.json"), "application/json");
  assert_string_equal(mime_db_lookup(&mime, "noext"), "application/octet-stream");
  assert_string_equal(mime_db_lookup(&mime, ".bashrc"), "application/octet-stream");
  assert_string_equal(mime_db_lookup(&mime, "x.unknown-ext"), "application/octet-stream");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(hostile_tree_yields_only_regular_files, setup, teardown),
      cmocka_unit_test_setup_teardown(caps_keep_metadata_and_drop_content, setup, teardown),
      cmocka_unit_test_setup_teardown(depth_is_bounded, setup, teardown),
      cmocka_unit_test_setup_teardown(safe_reads_refuse_links_and_fifos, setup, teardown),
      cmocka_unit_test_setup_teardown(mime_types, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
