/* Workspaces: prepared with the code and files (replacing what a hostile
 * session left), emptied and removed without following its symlinks, tmpfs
 * quotas and crash leftovers (as root). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "workspace.h"

static char base[64], root[128], outside[160];
static int root_fd = -1;
static struct sbx_error err;

static int setup(void **state) {
  snprintf(base, sizeof(base), "/tmp/sbx-ws-XXXXXX");
  assert_non_null(mkdtemp(base));
  snprintf(root, sizeof(root), "%s/workspaces", base);
  root_fd = workspace_root_open(root, &err);
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

static int make_ws(const char *name) {
  char p[256];
  snprintf(p, sizeof(p), "%s/%s", root, name);
  assert_int_equal(mkdir(p, 0700), 0);
  int fd = open(p, O_RDONLY | O_DIRECTORY);
  assert_true(fd >= 0);
  return fd;
}

static void prepare_writes_code_files_and_output(void **state) {
  struct workspace_file files[] = {{"data/in.txt", (const uint8_t *)"abc", 3}};
  int ws = make_ws("run1");
  assert_int_equal(
      workspace_prepare(ws, getuid(), getgid(), WORKSPACE_SCRIPT, "print(1)", 8, files, 1, &err),
      0);
  char p[256], buf[16] = {0};
  snprintf(p, sizeof(p), "%s/run1/main.py", root);
  FILE *f = fopen(p, "r");
  assert_non_null(f);
  assert_non_null(fgets(buf, sizeof(buf), f));
  fclose(f);
  assert_string_equal(buf, "print(1)");
  struct stat st;
  snprintf(p, sizeof(p), "%s/run1/mounts/data/in.txt", root);
  assert_int_equal(stat(p, &st), 0);
  assert_int_equal(st.st_size, 3);
  snprintf(p, sizeof(p), "%s/run1/output", root);
  assert_int_equal(stat(p, &st), 0);
  assert_true(S_ISDIR(st.st_mode));
  /* Emptying leaves the workspace itself, and nothing in it. */
  assert_int_equal(workspace_empty(ws, &err), 0);
  snprintf(p, sizeof(p), "%s/run1/main.py", root);
  assert_int_equal(lstat(p, &st), -1);
  close(ws);
}

/* What a session's earlier run may leave where the server writes next:
 * symlinks to outside, a FIFO, a directory. Replaced, never followed. */
static void prepare_replaces_hostile_entries(void **state) {
  char p[256], target[256];
  int ws = make_ws("run3");
  snprintf(target, sizeof(target), "%s/keep.txt", outside);
  snprintf(p, sizeof(p), "%s/run3/main.py", root);
  assert_int_equal(symlink(target, p), 0);
  snprintf(p, sizeof(p), "%s/run3/mounts", root);
  assert_int_equal(symlink(outside, p), 0);
  snprintf(p, sizeof(p), "%s/run3/output", root);
  assert_int_equal(mkfifo(p, 0600), 0);
  struct workspace_file files[] = {{"keep.txt", (const uint8_t *)"EVIL", 4}};
  assert_int_equal(
      workspace_prepare(ws, getuid(), getgid(), WORKSPACE_SCRIPT, "x = 1\n", 6, files, 1, &err), 0);
  char buf[16] = {0};
  FILE *f = fopen(target, "r");
  assert_non_null(f);
  assert_non_null(fgets(buf, sizeof(buf), f));
  fclose(f);
  assert_string_equal(buf, "keep"); /* the outside file is untouched */
  struct stat st;
  snprintf(p, sizeof(p), "%s/run3/mounts", root);
  assert_int_equal(lstat(p, &st), 0);
  assert_true(S_ISDIR(st.st_mode));
  snprintf(p, sizeof(p), "%s/run3/output", root);
  assert_int_equal(lstat(p, &st), 0);
  assert_true(S_ISDIR(st.st_mode));
  snprintf(p, sizeof(p), "%s/run3/main.py", root);
  assert_int_equal(lstat(p, &st), 0);
  assert_true(S_ISREG(st.st_mode));
  assert_int_equal(workspace_empty(ws, &err), 0);
  assert_int_equal(stat(target, &st), 0);
  close(ws);
}

static void chown_tree_never_follows_links(void **state) {
  if (geteuid() != 0)
    skip();
  char p[256], target[256];
  int ws = make_ws("run4");
  snprintf(target, sizeof(target), "%s/keep.txt", outside);
  snprintf(p, sizeof(p), "%s/run4/d", root);
  assert_int_equal(mkdir(p, 0700), 0);
  snprintf(p, sizeof(p), "%s/run4/d/link", root);
  assert_int_equal(symlink(target, p), 0);
  snprintf(p, sizeof(p), "%s/run4/d/f", root);
  FILE *f = fopen(p, "w");
  fclose(f);
  assert_int_equal(workspace_chown_tree(ws, 63999, 63999, &err), 0);
  struct stat st;
  assert_int_equal(stat(p, &st), 0);
  assert_int_equal(st.st_uid, 63999);
  assert_int_equal(stat(target, &st), 0);
  assert_int_equal(st.st_uid, 0); /* the link's target kept its owner */
  snprintf(p, sizeof(p), "%s/run4/d/link", root);
  assert_int_equal(lstat(p, &st), 0);
  assert_int_equal(st.st_uid, 63999); /* the link itself changed */
  close(ws);
}

/* As root: a real tmpfs with a quota; writing past it fails with ENOSPC,
 * and a stale mount is found and detached as after a crash. */
static void tmpfs_quota_and_stale_removal(void **state) {
  if (geteuid() != 0)
    skip();
  int ws = workspace_mount(root_fd, root, "slot-9", 1 << 20, 64, getuid(), getgid(), &err);
  assert_true(ws >= 0);
  int fd = openat(ws, "big", O_WRONLY | O_CREAT, 0600);
  assert_true(fd >= 0);
  static char chunk[65536];
  int werr = 0;
  for (int i = 0; i < 64 && werr == 0; i++)
    if (write(fd, chunk, sizeof(chunk)) < 0)
      werr = errno;
  close(fd);
  assert_int_equal(werr, ENOSPC);
  assert_int_equal(workspace_resize(root, "slot-9", 2 << 20, 64, &err), 0);
  close(ws);
  /* Left mounted, as by a crash: found and detached. */
  assert_int_equal(workspace_remove_stale(root_fd, root), 1);
  char p[256];
  struct stat st;
  snprintf(p, sizeof(p), "%s/slot-9", root);
  assert_int_equal(lstat(p, &st), -1);
}

static void remove_does_not_follow_symlinks(void **state) {
  char p[256], target[256];
  close(make_ws("run2"));
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
  assert_int_equal(workspace_remove(root_fd, "run2", &err), 0);
  struct stat st;
  snprintf(p, sizeof(p), "%s/run2", root);
  assert_int_equal(lstat(p, &st), -1);
  assert_int_equal(stat(target, &st), 0); /* the outside file survived */
  assert_int_equal(stat(outside, &st), 0);
}

static void remove_missing_is_fine(void **state) {
  assert_int_equal(workspace_remove(root_fd, "never-made", &err), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(prepare_writes_code_files_and_output, setup, teardown),
      cmocka_unit_test_setup_teardown(prepare_replaces_hostile_entries, setup, teardown),
      cmocka_unit_test_setup_teardown(chown_tree_never_follows_links, setup, teardown),
      cmocka_unit_test_setup_teardown(tmpfs_quota_and_stale_removal, setup, teardown),
      cmocka_unit_test_setup_teardown(remove_does_not_follow_symlinks, setup, teardown),
      cmocka_unit_test_setup_teardown(remove_missing_is_fine, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
