/* engine_test_fs.c: what a run is given besides its workspace: extra
 * read-only mounts (the requirements store's site directory) and the
 * program to start. A mount target outside the few places allowed, or a
 * program that cannot start, is refused before anything runs. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine_test_common.h"

/* A directory under state_dir, dir/name, holding one Python module. */
struct module_dir {
  char dir[WS_PATH], file[FILE_PATH];
};

static void module_dir_make(struct module_dir *m, const char *name, const char *module,
                            const char *text) {
  snprintf(m->dir, sizeof m->dir, "%s/%s", state_dir, name);
  mkdir(m->dir, 0755);
  snprintf(m->file, sizeof m->file, "%s/%s.py", m->dir, module);
  FILE *f = fopen(m->file, "w");
  fputs(text, f);
  fclose(f);
}

static void module_dir_remove(const struct module_dir *m) {
  unlink(m->file);
  rmdir(m->dir);
}

/* "python3 -I -c code" with mount m: what it prints is expected. */
static void expect_mounted_stdout(const char *code, const struct sandbox_mount *m,
                                  const char *expected) {
  const char *argv[] = {PY, "-I", "-c", code, NULL};
  struct run run;
  run_in_slot(0, argv, NULL, NULL, 0, m, 1, &run);
  assert_stdout(&run, expected);
  sandbox_result_free(&run.r);
}

static void test_extra_mount_is_read_only(void **state) {
  struct module_dir md;
  module_dir_make(&md, "extra", "mod", "VALUE = 42\n");
  /* A zygote's runs take extra mounts under /usr/ only (the requirements
   * store's site directory): the same test there. */
  const char *target = zygote_mode ? SITE_DIR : "/opt/env/lib";
  struct sandbox_mount m = {.source = md.dir, .target = target};
  char code[512];
  snprintf(code, sizeof code,
           "import sys; sys.path.insert(0, '%s'); import mod\n"
           "print(mod.VALUE)\n"
           "try:\n    open('%s/x', 'w')\nexcept OSError as e:\n"
           "    print(e.errno)\n",
           target, target);
  expect_mounted_stdout(code, &m, "42\n30\n");
  module_dir_remove(&md);
}

static void test_site_packages_mount_is_on_sys_path(void **state) {
  /* What the requirements store does: a read-only package directory over the
   * interpreter's /usr/local site directory, importable even with -I. */
  struct module_dir md;
  module_dir_make(&md, "site", "sbx_site_probe", "VALUE = 'from the store'\n");
  struct sandbox_mount m = {.source = md.dir, .target = SITE_DIR};
  const char *code = "import sbx_site_probe; print(sbx_site_probe.VALUE)";
  expect_mounted_stdout(code, &m, "from the store\n");
  /* Only over an existing directory there, never a new one under /usr. */
  struct sandbox_mount bad = {.source = md.dir, .target = "/usr/local/lib/no-such-dir"};
  const char *argv[] = {PY, "-I", "-c", code, NULL};
  struct run run;
  run_in_slot(0, argv, NULL, NULL, 0, &bad, 1, &run);
  assert_int_equal(run.rc, -1);
  module_dir_remove(&md);
}

static void test_bad_mount_target_refused(void **state) {
  static const char *const bad[] = {"/usr/lib/x", "/usr/local",  "/usr/local/../lib",
                                    "relative",   "/opt/../etc", "/",
                                    "/proc",      "/opt//x",     "/workspace/x"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    struct sandbox_mount m = {.source = "/usr/share", .target = bad[i]};
    const char *argv[] = {PY, "-c", "print(1)", NULL};
    struct run run;
    run_in_slot(0, argv, NULL, NULL, 0, &m, 1, &run);
    assert_int_equal(run.rc, -1);
    assert_int_equal(run.err.errnum, EINVAL);
  }
}

static void test_missing_program_is_setup_error(void **state) {
  skip_in_zygote_mode("a zygote runs /usr/bin/python3 only; a missing script is "
                      "test_zygote_missing_script_like_cold");
  const char *argv[] = {"/usr/bin/no-such-interpreter", NULL};
  struct run run;
  run_in_slot(0, argv, NULL, NULL, 0, NULL, 0, &run);
  assert_int_equal(run.rc, -1);
  assert_int_equal(run.err.errnum, ENOENT);
  assert_non_null(strstr(run.err.msg, "exec"));
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup(test_extra_mount_is_read_only, test_setup),
    cmocka_unit_test_setup(test_bad_mount_target_refused, test_setup),
    cmocka_unit_test_setup(test_site_packages_mount_is_on_sys_path, test_setup),
    cmocka_unit_test_setup(test_missing_program_is_setup_error, test_setup),
};
const struct engine_tests engine_fs_tests = ENGINE_TESTS(tests);
