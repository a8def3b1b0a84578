/* Workspaces: created with the code and files, removed without following
 * the symlinks a hostile program may leave. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "workspace.h"

static char base[64], root[128], outside[160];
static int root_fd = -1;

static int setup(void **state) {
  snprintf(base, sizeof(base), "/tmp/sbx-ws-XXXXXX");
  assert_non_null(mkdtemp(base));
  snprintf(root, sizeof(root), "%s/workspaces", base);
  root_fd = workspace_root_open(root);
  assert_true(root_fd >= 0);
  snprintf(outside, sizeof(outside), "%s/precious", base);
  mkdir(outside, 0755);
  char p[256];
  snprintf(p, sizeof(p), "%s/keep.txt", outside);
  FILE *f = fopen(p, "w");
  fputs("keep", f);
  fclose(f);
  return 0;
}

static int teardown(void **state) {
  char cmd[256];
  close(root_fd);
  snprintf(cmd, sizeof(cmd), "rm -rf %s", base);
  return system(cmd);
}

static void create_writes_code_and_files(void **state) {
  struct workspace_file files[] = {{"data/in.txt", (const uint8_t *)"abc", 3}};
  char msg[256];
  assert_int_equal(workspace_create(root_fd, "run1", getuid(), getgid(), "print(1)", files, 1, msg,
                                    sizeof(msg)),
                   0);
  char p[256], buf[16] = {0};
  snprintf(p, sizeof(p), "%s/run1/main.py", root);
  FILE *f = fopen(p, "r");
  assert_non_null(f);
  assert_non_null(fgets(buf, sizeof(buf), f));
  fclose(f);
  assert_string_equal(buf, "print(1)");
  snprintf(p, sizeof(p), "%s/run1/data/in.txt", root);
  struct stat st;
  assert_int_equal(stat(p, &st), 0);
  assert_int_equal(st.st_size, 3);
  snprintf(p, sizeof(p), "%s/run1", root);
  assert_int_equal(stat(p, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0700);
  /* The same name twice: EEXIST, and the first is untouched. */
  assert_int_equal(workspace_create(root_fd, "run1", getuid(), getgid(), "x", NULL, 0, msg,
                                    sizeof(msg)),
                   -1);
  assert_int_equal(workspace_remove(root_fd, "run1", msg, sizeof(msg)), 0);
  assert_int_equal(stat(p, &st), -1);
}

static void remove_does_not_follow_symlinks(void **state) {
  char msg[256], p[256], target[256];
  assert_int_equal(workspace_create(root_fd, "run2", getuid(), getgid(), "x", NULL, 0, msg,
                                    sizeof(msg)),
                   0);
  /* What a hostile run could leave: links to outside, deep dirs, odd modes. */
  snprintf(p, sizeof(p), "%s/run2/link-dir", root);
  assert_int_equal(symlink(outside, p), 0);
  snprintf(target, sizeof(target), "%s/keep.txt", outside);
  snprintf(p, sizeof(p), "%s/run2/link-file", root);
  assert_int_equal(symlink(target, p), 0);
  snprintf(p, sizeof(p), "%s/run2/a", root);
  mkdir(p, 0700);
  snprintf(p, sizeof(p), "%s/run2/a/b", root);
  assert_int_equal(mkdir(p, 0700), 0);
  snprintf(p, sizeof(p), "%s/run2/a/b/c", root);
  assert_int_equal(mkdir(p, 0700), 0);
  snprintf(p, sizeof(p), "%s/run2/a/b/c/up", root);
  assert_int_equal(symlink("../../../../../precious", p), 0);
  if (geteuid() == 0) { /* root (the server) must get through a mode-0 dir */
    snprintf(p, sizeof(p), "%s/run2/a/b", root);
    assert_int_equal(chmod(p, 0), 0);
  }
  assert_int_equal(workspace_remove(root_fd, "run2", msg, sizeof(msg)), 0);
  struct stat st;
  snprintf(p, sizeof(p), "%s/run2", root);
  assert_int_equal(lstat(p, &st), -1);
  assert_int_equal(stat(target, &st), 0); /* the outside file survived */
  assert_int_equal(stat(outside, &st), 0);
}

static void remove_missing_is_fine(void **state) {
  char msg[256];
  assert_int_equal(workspace_remove(root_fd, "never-made", msg, sizeof(msg)), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(create_writes_code_and_files, setup, teardown),
      cmocka_unit_test_setup_teardown(remove_does_not_follow_symlinks, setup, teardown),
      cmocka_unit_test_setup_teardown(remove_missing_is_fine, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
