/* engine_test.c: the sandbox engine against the real kernel, as root.
 *
 * One test per killed_by value, per isolation property and per limit. The
 * backend comes from SANDBOX_TEST_BACKEND (auto, cgroup-v1, cgroup-v2,
 * rlimit); every test prints the one that ran, and SANDBOX_TEST_EXPECT_BACKEND
 * (e.g. "cgroup v2") makes the whole group fail when another one was picked.
 * SANDBOX_TEST_TIME_SCALE (default 1) multiplies the wall-time bounds and the
 * timeouts they depend on, for slow machines such as the TCG-emulated VM of
 * tests/vm; it is never set on the host. Without root the tests skip loudly,
 * and fail when CI=true.
 *
 * SANDBOX_TEST_ZYGOTE=1 (ctest engine_zygote) runs the same tests with runs
 * forked from zygotes (docs/ZYGOTE.md): the engine is made with zygotes that
 * preload ZYGOTE_PRELOAD, and every Python program runs with spec.zygote as
 * "python3 -u /workspace/main.py" (a "-c CODE" is written there first), so
 * each property proven for a cold run is proven again for a zygote's. The
 * few tests whose program cannot be a zygote's say why and skip. Then the
 * zygote's own tests (what is fresh per run, what a zygote's end does to
 * the next run) and two more engines: one recycling every two runs, one
 * whose preload fails. SANDBOX_TEST_FILTER (a cmocka pattern such as
 * "test_zygote_*") runs only the tests it matches.
 *
 * This file is main: the families (engine_test_limits.c, _io, _net,
 * _isolation, _fs, _slots, _zygote; shared helpers in engine_test_common.c)
 * run as one cmocka group "engine" on one engine, then in zygote mode the
 * zygote groups, each on an engine of its own. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine_test_common.h"

/* The families of the "engine" group, in the order they run. */
static const struct engine_tests *const engine_group[] = {
    &engine_limits_tests, &engine_io_tests,    &engine_net_tests,        &engine_isolation_tests,
    &engine_fs_tests,     &engine_slots_tests, &engine_zygote_off_tests,
};

/* Runs the families in one group (one engine for them all, as cmocka's
 * group setup makes it). */
static int run_group(const char *name, const struct engine_tests *const *families, size_t n,
                     CMFixtureFunction setup) {
  size_t total = 0;
  for (size_t i = 0; i < n; i++)
    total += families[i]->n;
  struct CMUnitTest *all = calloc(total, sizeof *all);
  if (all == NULL)
    return 1;
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < families[i]->n; j++)
      all[k++] = families[i]->tests[j];
  /* What cmocka_run_group_tests_name expands to, for an array built here. */
  int failed = _cmocka_run_group_tests(name, all, total, setup, group_teardown);
  free(all);
  return failed;
}

int main(void) {
  if (geteuid() != 0) {
    const char *ci = getenv("CI");
    fprintf(stderr, "SKIP: engine tests need root (namespaces, mounts, cgroups)\n");
    if (ci != NULL && strcmp(ci, "true") == 0) {
      fprintf(stderr, "FAIL: CI=true and not root: a skipped root test is a failure\n");
      return 1;
    }
    return 77; /* ctest's SKIP_RETURN_CODE */
  }
  if (read_environment() < 0)
    return 1;
  /* SANDBOX_TEST_FILTER=test_zygote_* runs only the tests it matches. */
  const char *filter = getenv("SANDBOX_TEST_FILTER");
  if (filter != NULL && filter[0] != '\0')
    cmocka_set_test_filter(filter);
  int failed =
      run_group("engine", engine_group, sizeof engine_group / sizeof engine_group[0], group_setup);
  if (!zygote_mode)
    return failed;
  /* Each group makes an engine of its own, after the one before is gone. */
  const struct engine_tests *const zygote[] = {&engine_zygote_tests};
  const struct engine_tests *const recycle[] = {&engine_zygote_recycle_tests};
  const struct engine_tests *const bad_preload[] = {&engine_zygote_bad_preload_tests};
  failed += run_group("zygote", zygote, 1, group_setup);
  failed += run_group("zygote_recycle", recycle, 1, group_setup_recycle);
  failed += run_group("zygote_bad_preload", bad_preload, 1, group_setup_bad_preload);
  return failed;
}
