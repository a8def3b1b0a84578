/* matplotlib's font list maker (server/sandbox/fontlist.c), without an
 * engine: it makes fontlist-vNNN.json in <lib>/matplotlib and removes its
 * build directory; a lib directory it cannot write in is FAILED with the
 * reason at once; one stopped while it runs is killed, reaped and FAILED
 * saying so, its build directory removed too. Runs the system's python3
 * with matplotlib (scripts/install-deps installs it). */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "fontlist.h"
#include "sandbox.h"

static char lib[] = "/tmp/sbx-fontlist-XXXXXX";

static int make_lib(void **state) {
  (void)state;
  strcpy(lib, "/tmp/sbx-fontlist-XXXXXX");
  return mkdtemp(lib) == NULL ? -1 : 0;
}

static int remove_lib(void **state) {
  (void)state;
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", lib);
  return system(cmd) == 0 ? 0 : -1;
}

static bool exists(const char *dir, const char *name) {
  char path[256];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  struct stat st;
  return stat(path, &st) == 0;
}

static void test_made_and_build_dir_removed(void **state) {
  (void)state;
  struct fontlist f;
  fontlist_start(&f, lib);
  enum sandbox_fontlist_state st = SANDBOX_FONTLIST_PENDING;
  for (int i = 0; i < 1200 && (st = fontlist_poll(&f)) == SANDBOX_FONTLIST_PENDING; i++)
    usleep(100 * 1000);
  assert_int_equal(st, SANDBOX_FONTLIST_READY);
  assert_true(f.ms > 0);
  char out[256];
  snprintf(out, sizeof out, "%s/matplotlib", lib);
  DIR *d = opendir(out);
  assert_non_null(d);
  int lists = 0;
  for (struct dirent *de; (de = readdir(d)) != NULL;)
    lists += strncmp(de->d_name, "fontlist-v", 10) == 0;
  closedir(d);
  assert_int_equal(lists, 1);
  assert_false(exists(lib, "matplotlib.build"));
  fontlist_stop(&f); /* after it ended: nothing to do */
  assert_int_equal(fontlist_poll(&f), SANDBOX_FONTLIST_READY);
}

static void test_stopped_while_running(void **state) {
  (void)state;
  struct fontlist f;
  fontlist_start(&f, lib);
  assert_int_equal(fontlist_poll(&f), SANDBOX_FONTLIST_PENDING);
  fontlist_stop(&f);
  assert_int_equal(fontlist_poll(&f), SANDBOX_FONTLIST_FAILED);
  assert_string_equal(f.why, "killed by signal 9");
  assert_false(exists(lib, "matplotlib.build"));
}

static void test_unwritable_lib_fails_at_once(void **state) {
  (void)state;
  struct fontlist f;
  fontlist_start(&f, "/nonexistent/sbx-fontlist");
  assert_int_equal(f.pid, 0);
  assert_int_equal(fontlist_poll(&f), SANDBOX_FONTLIST_FAILED);
  assert_non_null(strstr(f.why, "mkdir /nonexistent/sbx-fontlist/matplotlib"));
  assert_non_null(strstr(f.why, "No such file or directory"));
  fontlist_stop(&f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_made_and_build_dir_removed, make_lib, remove_lib),
      cmocka_unit_test_setup_teardown(test_stopped_while_running, make_lib, remove_lib),
      cmocka_unit_test(test_unwritable_lib_fails_at_once),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
