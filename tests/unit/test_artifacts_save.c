/* Unit tests of libsandbox-client's artifact saver (client/artifacts.c):
 * the paths a hostile sandbox or server could name are refused and leave
 * nothing behind, outside the directory or in it; symlinks, FIFOs and
 * hard-linked files planted in the directory are never written through;
 * good paths are written, their directories made. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandbox_client.h"

struct fixture {
  char root[64]; /* holds dir and outside */
  char dir[96];  /* where artifacts go */
  char outside[96];
};

static int setup(void **state) {
  struct fixture *f = calloc(1, sizeof(*f));
  if (f == NULL)
    return -1;
  snprintf(f->root, sizeof(f->root), "/tmp/sbxc-artifacts-XXXXXX");
  if (mkdtemp(f->root) == NULL)
    return -1;
  snprintf(f->dir, sizeof(f->dir), "%s/dir", f->root);
  snprintf(f->outside, sizeof(f->outside), "%s/outside", f->root);
  if (mkdir(f->dir, 0755) < 0 || mkdir(f->outside, 0755) < 0)
    return -1;
  *state = f;
  return 0;
}

static int teardown(void **state) {
  struct fixture *f = *state;
  char cmd[128];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->root);
  int rv = system(cmd);
  free(f);
  return rv == 0 ? 0 : -1;
}

static struct sbxc_artifact artifact(const char *rel, const char *content) {
  return (struct sbxc_artifact){.name = rel,
                                .relative_path = rel,
                                .size = strlen(content),
                                .mime = "text/plain",
                                .content = (const uint8_t *)content,
                                .content_len = strlen(content)};
}

/* Whether the directory path holds nothing. */
static bool empty_dir(const char *path) {
  char cmd[160];
  snprintf(cmd, sizeof(cmd), "test -z \"$(ls -A '%s')\"", path);
  return system(cmd) == 0;
}

static char *slurp(const char *path) {
  static char buf[256];
  FILE *fp = fopen(path, "re");
  if (fp == NULL)
    return NULL;
  size_t n = fread(buf, 1, sizeof(buf) - 1, fp);
  fclose(fp);
  buf[n] = '\0';
  return buf;
}

static void refused(struct fixture *f, const char *rel, int errnum, const char *why) {
  struct sbxc_artifact a = artifact(rel, "hostile");
  char err[256] = "";
  errno = 0;
  assert_int_equal(sbxc_artifact_save(&a, f->dir, err, sizeof(err)), -1);
  assert_int_equal(errno, errnum);
  assert_non_null(strstr(err, why));
  assert_int_equal(strncmp(err, "artifact \"", 10), 0);
}

static void hostile_paths_refused(void **state) {
  struct fixture *f = *state;
  refused(f, "../x", EINVAL, "'..' component");
  refused(f, "/abs", EINVAL, "absolute");
  refused(f, "/tmp/escape-absolute.txt", EINVAL, "absolute");
  refused(f, "a/../../b", EINVAL, "'..' component");
  refused(f, "a//b", EINVAL, "empty, '.' or '..' component");
  refused(f, "a/", EINVAL, "empty, '.' or '..' component");
  refused(f, "./a", EINVAL, "'.'");
  refused(f, "a/.", EINVAL, "'.'");
  refused(f, "..", EINVAL, "'..' component");
  refused(f, "", EINVAL, "empty");
  struct sbxc_artifact no_path = artifact("", "x");
  no_path.relative_path = NULL;
  char err[128];
  assert_int_equal(sbxc_artifact_save(&no_path, f->dir, err, sizeof(err)), -1);
  char long_name[300];
  memset(long_name, 'n', 256);
  long_name[256] = '\0';
  refused(f, long_name, EINVAL, "over 255 bytes");
  char long_path[4200];
  for (size_t i = 0; i + 2 < sizeof(long_path); i += 2)
    memcpy(long_path + i, "d/", 2);
  long_path[sizeof(long_path) - 2] = 'x';
  long_path[sizeof(long_path) - 1] = '\0';
  refused(f, long_path, EINVAL, "too long");
  /* Nothing was made, in the directory or beside it. */
  assert_true(empty_dir(f->dir));
  assert_true(empty_dir(f->outside));
  assert_null(slurp("/tmp/escape-absolute.txt"));
}

static void printable_message(void **state) {
  struct fixture *f = *state;
  struct sbxc_artifact a = artifact("\x1b]0;title\x07/../x", "hostile");
  char err[256];
  assert_int_equal(sbxc_artifact_save(&a, f->dir, err, sizeof(err)), -1);
  assert_null(strchr(err, '\x1b'));
  assert_null(strchr(err, '\x07'));
}

static void planted_symlinks_not_followed(void **state) {
  struct fixture *f = *state;
  char link[160], victim[160];
  snprintf(link, sizeof(link), "%s/sub", f->dir);
  assert_int_equal(symlink(f->outside, link), 0);
  refused(f, "sub/x", EINVAL, "symlink or not a directory");
  refused(f, "sub/deeper/x", EINVAL, "symlink or not a directory");
  /* A symlink at the file's own name, to a file outside. */
  snprintf(victim, sizeof(victim), "%s/victim.txt", f->outside);
  FILE *fp = fopen(victim, "we");
  assert_non_null(fp);
  fputs("precious", fp);
  fclose(fp);
  snprintf(link, sizeof(link), "%s/top.txt", f->dir);
  assert_int_equal(symlink(victim, link), 0);
  refused(f, "top.txt", EINVAL, "symlink, FIFO or directory");
  /* A file where a directory should be. */
  snprintf(link, sizeof(link), "%s/file", f->dir);
  fp = fopen(link, "we");
  assert_non_null(fp);
  fclose(fp);
  refused(f, "file/x", EINVAL, "symlink or not a directory");
  assert_string_equal(slurp(victim), "precious");
  char cmd[200];
  snprintf(cmd, sizeof(cmd), "test \"$(ls -A '%s')\" = victim.txt", f->outside);
  assert_int_equal(system(cmd), 0);
}

static void fifo_dir_and_hard_link_refused(void **state) {
  struct fixture *f = *state;
  char path[160], victim[160];
  snprintf(path, sizeof(path), "%s/f.txt", f->dir);
  assert_int_equal(mkfifo(path, 0644), 0);
  refused(f, "f.txt", EINVAL, "symlink, FIFO or directory"); /* and it did not block */
  snprintf(path, sizeof(path), "%s/d", f->dir);
  assert_int_equal(mkdir(path, 0755), 0);
  refused(f, "d", EINVAL, "symlink, FIFO or directory");
  snprintf(victim, sizeof(victim), "%s/victim.txt", f->outside);
  FILE *fp = fopen(victim, "we");
  assert_non_null(fp);
  fputs("precious", fp);
  fclose(fp);
  snprintf(path, sizeof(path), "%s/linked.txt", f->dir);
  assert_int_equal(link(victim, path), 0);
  refused(f, "linked.txt", EINVAL, "other hard links");
  assert_string_equal(slurp(victim), "precious");
}

static void good_paths_written(void **state) {
  struct fixture *f = *state;
  char err[256] = "", path[200];
  struct sbxc_artifact a = artifact("plot.png", "png bytes");
  assert_int_equal(sbxc_artifact_save(&a, f->dir, err, sizeof(err)), 0);
  snprintf(path, sizeof(path), "%s/plot.png", f->dir);
  assert_string_equal(slurp(path), "png bytes");
  a = artifact("a/b/c.txt", "deep");
  assert_int_equal(sbxc_artifact_save(&a, f->dir, err, sizeof(err)), 0);
  snprintf(path, sizeof(path), "%s/a/b/c.txt", f->dir);
  assert_string_equal(slurp(path), "deep");
  /* Again, shorter: the file is truncated, not appended to. */
  a = artifact("a/b/c.txt", "x");
  assert_int_equal(sbxc_artifact_save(&a, f->dir, err, sizeof(err)), 0);
  assert_string_equal(slurp(path), "x");
  /* Names that only look odd are names. */
  a = artifact("..hidden/.x/...", "dots");
  assert_int_equal(sbxc_artifact_save(&a, f->dir, err, sizeof(err)), 0);
  snprintf(path, sizeof(path), "%s/..hidden/.x/...", f->dir);
  assert_string_equal(slurp(path), "dots");
  /* A directory that does not exist yet is made, with its parents. */
  char fresh[160];
  snprintf(fresh, sizeof(fresh), "%s/new/er", f->root);
  a = artifact("e.txt", "");
  assert_int_equal(sbxc_artifact_save(&a, fresh, err, sizeof(err)), 0);
  snprintf(path, sizeof(path), "%s/e.txt", fresh);
  assert_string_equal(slurp(path), "");
  assert_true(empty_dir(f->outside));
}

static void omitted_and_the_whole_result(void **state) {
  struct fixture *f = *state;
  struct sbxc_artifact arts[4] = {artifact("one.txt", "1"), artifact("big.bin", ""),
                                  artifact("../escape.txt", "x"), artifact("three.txt", "3")};
  arts[1].content_omitted = true;
  arts[1].size = 1u << 30;
  char err[256] = "";
  errno = 0;
  assert_int_equal(sbxc_artifact_save(&arts[1], f->dir, err, sizeof(err)), -1);
  assert_int_equal(errno, ENODATA);
  assert_non_null(strstr(err, "left its content out"));
  struct sbxc_result r = {.artifacts = arts, .n_artifacts = 4};
  /* The omitted one is passed over; the hostile one stops the saving. */
  assert_int_equal(sbxc_artifacts_save(&r, f->dir, err, sizeof(err)), -1);
  assert_non_null(strstr(err, "../escape.txt"));
  char path[200];
  snprintf(path, sizeof(path), "%s/one.txt", f->dir);
  assert_string_equal(slurp(path), "1");
  snprintf(path, sizeof(path), "%s/three.txt", f->dir);
  assert_null(slurp(path));
  snprintf(path, sizeof(path), "%s/escape.txt", f->root);
  assert_null(slurp(path));
  r.n_artifacts = 2;
  assert_int_equal(sbxc_artifacts_save(&r, f->dir, err, sizeof(err)), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(hostile_paths_refused, setup, teardown),
      cmocka_unit_test_setup_teardown(printable_message, setup, teardown),
      cmocka_unit_test_setup_teardown(planted_symlinks_not_followed, setup, teardown),
      cmocka_unit_test_setup_teardown(fifo_dir_and_hard_link_refused, setup, teardown),
      cmocka_unit_test_setup_teardown(good_paths_written, setup, teardown),
      cmocka_unit_test_setup_teardown(omitted_and_the_whole_result, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
