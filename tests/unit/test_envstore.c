/* The requirements store: one build per key however many ask at once, a
 * failed build's answer for every waiter, the cap on builds at once, LRU
 * eviction that never takes an environment in use, commits of hostile
 * trees, and what a restart finds. Real directories; no root needed. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "envstore.h"
#include "sandbox/sandbox.h"

static char root[64];

static const char *key(char c) {
  static char keys[4][REQUIREMENT_KEY_HEX + 1];
  char *k = keys[(c - 'a') & 3];
  memset(k, c, REQUIREMENT_KEY_HEX);
  k[REQUIREMENT_KEY_HEX] = '\0';
  return k;
}

static int setup(void **state) {
  snprintf(root, sizeof(root), "/tmp/sbx-envstore-XXXXXX");
  assert_non_null(mkdtemp(root));
  return 0;
}

static int teardown(void **state) {
  int fd = open("/tmp", O_RDONLY | O_DIRECTORY);
  sandbox_remove_tree(fd, root + 5);
  close(fd);
  return 0;
}

/* A tree as pip would leave it, plus what a hostile build adds. */
static int make_site(const char *name, size_t file_bytes) {
  char dir[128], path[192];
  snprintf(dir, sizeof(dir), "%s/%s", root, name);
  assert_int_equal(mkdir(dir, 0755), 0);
  snprintf(path, sizeof(path), "%s/pkg", dir);
  assert_int_equal(mkdir(path, 0755), 0);
  snprintf(path, sizeof(path), "%s/pkg/__init__.py", dir);
  FILE *f = fopen(path, "w");
  for (size_t i = 0; i < file_bytes; i++)
    fputc('x', f);
  fclose(f);
  snprintf(path, sizeof(path), "%s/escape", dir);
  assert_int_equal(symlink("/etc/shadow", path), 0);
  snprintf(path, sizeof(path), "%s/fifo", dir);
  assert_int_equal(mkfifo(path, 0644), 0);
  return open(dir, O_RDONLY | O_DIRECTORY);
}

/* Fails a build the way the installer does. */
static void fail_build(struct envstore *s, struct envstore_env *env, sbx_code code,
                       const char *why) {
  struct sbx_error err;
  sbx_error_set(&err, code, 0, "%s", why);
  envstore_fail(s, env, &err);
}

static void open_store(struct envstore *s, uint64_t cap) {
  char dir[96];
  snprintf(dir, sizeof(dir), "%s/envs", root);
  assert_int_equal(envstore_open(s, dir, cap, NULL), 0);
}

static struct envstore_env *build(struct envstore *s, char c, size_t bytes) {
  struct envstore_env *env = NULL;
  struct sbx_error err;
  char name[16];
  assert_int_equal(envstore_acquire(s, key(c), &env, &err), ENVSTORE_BUILD);
  snprintf(name, sizeof(name), "src-%c", c);
  int src = make_site(name, bytes);
  assert_int_equal(envstore_commit(s, env, src, "requirement=x", &err), 0);
  close(src);
  return env;
}

static void build_then_use(void **state) {
  struct envstore s;
  open_store(&s, 1 << 30);
  struct envstore_env *env = build(&s, 'a', 10);
  char site[PATH_MAX], path[PATH_MAX + 32];
  envstore_site_path(&s, env, site, sizeof(site));
  envstore_release(&s, env);
  snprintf(path, sizeof(path), "%s/pkg/__init__.py", site);
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  assert_int_equal(st.st_mode & 07777, 0644);
  snprintf(path, sizeof(path), "%s/escape", site);
  assert_int_equal(lstat(path, &st), -1); /* the symlink was not copied */
  snprintf(path, sizeof(path), "%s/fifo", site);
  assert_int_equal(lstat(path, &st), -1);

  struct sbx_error err;
  assert_int_equal(envstore_acquire(&s, key('a'), &env, &err), ENVSTORE_USE);
  envstore_release(&s, env);
  size_t n;
  uint64_t bytes;
  envstore_counts(&s, &n, &bytes);
  assert_int_equal(n, 1);
  assert_true(bytes > 0);
  assert_int_equal(atomic_load(&s.builds_total), 1);
  envstore_close(&s);
}

struct waiter {
  struct envstore *s;
  enum envstore_outcome outcome;
  struct sbx_error err;
  struct envstore_env *env;
};

static void *wait_for_key(void *arg) {
  struct waiter *w = arg;
  w->outcome = envstore_acquire(w->s, key('b'), &w->env, &w->err);
  return NULL;
}

static void waiters_share_one_build(void **state) {
  struct envstore s;
  open_store(&s, 1 << 30);
  struct envstore_env *env;
  struct sbx_error err;
  assert_int_equal(envstore_acquire(&s, key('b'), &env, &err), ENVSTORE_BUILD);
  struct waiter w[3] = {{.s = &s}, {.s = &s}, {.s = &s}};
  pthread_t t[3];
  for (int i = 0; i < 3; i++)
    pthread_create(&t[i], NULL, wait_for_key, &w[i]);
  usleep(100 * 1000); /* they wait on the build; a wrong store would build again */
  fail_build(&s, env, SBX_FAILED_PRECONDITION, "could not install 'b'");
  for (int i = 0; i < 3; i++) {
    pthread_join(t[i], NULL);
    assert_int_equal(w[i].outcome, ENVSTORE_ERROR);
    assert_int_equal(w[i].err.code, SBX_FAILED_PRECONDITION);
    assert_string_equal(w[i].err.msg, "could not install 'b'");
  }
  assert_int_equal(atomic_load(&s.build_failures_total), 1);
  /* A failed key is built again by the next caller. */
  assert_int_equal(envstore_acquire(&s, key('b'), &env, &err), ENVSTORE_BUILD);
  fail_build(&s, env, SBX_INTERNAL, "again");
  envstore_close(&s);
}

static void builds_at_once_are_capped(void **state) {
  struct envstore s;
  open_store(&s, 1 << 30);
  s.max_building = 1;
  struct envstore_env *first, *second;
  struct sbx_error err;
  assert_int_equal(envstore_acquire(&s, key('a'), &first, &err), ENVSTORE_BUILD);
  assert_int_equal(envstore_acquire(&s, key('b'), &second, &err), ENVSTORE_ERROR);
  assert_int_equal(err.code, SBX_RESOURCE_EXHAUSTED);
  fail_build(&s, first, SBX_INTERNAL, "done");
  assert_int_equal(envstore_acquire(&s, key('b'), &second, &err), ENVSTORE_BUILD);
  fail_build(&s, second, SBX_INTERNAL, "done");
  envstore_close(&s);
}

static void lru_eviction_spares_environments_in_use(void **state) {
  struct envstore s;
  open_store(&s, 1 << 30);
  struct envstore_env *a = build(&s, 'a', 40000);
  envstore_release(&s, a);
  struct envstore_env *b = build(&s, 'b', 40000); /* held: in use */
  size_t n;
  uint64_t one;
  envstore_counts(&s, &n, &one);
  s.cap_bytes = one / 2 + 1; /* room for one environment */
  struct envstore_env *c = build(&s, 'c', 10);
  envstore_counts(&s, &n, &one);
  /* a (idle, least recent) went; b is in use and c was just built. */
  char path[PATH_MAX];
  snprintf(path, sizeof(path), "%s/envs/%s", root, key('a'));
  assert_int_equal(access(path, F_OK), -1);
  snprintf(path, sizeof(path), "%s/envs/%s", root, key('b'));
  assert_int_equal(access(path, F_OK), 0);
  envstore_release(&s, c);
  envstore_release(&s, b); /* now idle: evicted down to the cap */
  envstore_counts(&s, &n, &one);
  assert_int_equal(n, 1);
  assert_true(atomic_load(&s.evictions_total) >= 2);
  envstore_close(&s);
}

static void restart_keeps_complete_environments_only(void **state) {
  struct envstore s;
  open_store(&s, 1 << 30);
  envstore_release(&s, build(&s, 'a', 10));
  envstore_close(&s);
  char path[PATH_MAX];
  snprintf(path, sizeof(path), "%s/envs/tmp-crashed", root);
  assert_int_equal(mkdir(path, 0755), 0); /* a commit a crash cut short */
  snprintf(path, sizeof(path), "%s/envs/%s", root, key('c'));
  assert_int_equal(mkdir(path, 0755), 0); /* no meta: incomplete */
  open_store(&s, 1 << 30);
  size_t n;
  uint64_t bytes;
  envstore_counts(&s, &n, &bytes);
  assert_int_equal(n, 1);
  snprintf(path, sizeof(path), "%s/envs/tmp-crashed", root);
  assert_int_equal(access(path, F_OK), -1);
  snprintf(path, sizeof(path), "%s/envs/%s", root, key('c'));
  assert_int_equal(access(path, F_OK), -1);
  struct envstore_env *env;
  struct sbx_error err;
  assert_int_equal(envstore_acquire(&s, key('a'), &env, &err), ENVSTORE_USE);
  envstore_release(&s, env);
  envstore_close(&s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(build_then_use, setup, teardown),
      cmocka_unit_test_setup_teardown(waiters_share_one_build, setup, teardown),
      cmocka_unit_test_setup_teardown(builds_at_once_are_capped, setup, teardown),
      cmocka_unit_test_setup_teardown(lru_eviction_spares_environments_in_use, setup, teardown),
      cmocka_unit_test_setup_teardown(restart_keeps_complete_environments_only, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
