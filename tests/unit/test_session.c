/* The session table: create on first use, one run at a time, close, TTL,
 * least-recently-used eviction at the cap. No mounts here: the table only
 * decides; the service tests check the files. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>
#include <string.h>
#include <time.h>

#include "session.h"
#include "tenants.h"

static struct sbx_error err;
/* Two tenants: ta for the single-tenant cases, tb beside it. */
static struct tenant ta = {.name = "a"}, tb = {.name = "b"};

/* The status of a table call: SBX_OK, or the code it failed with. */
static sbx_code status(int rc) {
  return rc == 0 ? SBX_OK : err.code;
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static void create_reserve_release(void **state) {
  struct session_table t;
  assert_int_equal(session_table_init(&t, 4, 60000), 0);
  struct session *s, *s2;
  bool created;
  assert_int_equal(status(session_reserve(&t, &ta, 0, "a", &s, &created, &err)), SBX_OK);
  assert_true(created);
  /* A second run while the first is queued or running: refused. */
  assert_int_equal(status(session_reserve(&t, &ta, 0, "a", &s2, &created, &err)),
                   SBX_FAILED_PRECONDITION);
  assert_non_null(strstr(err.msg, "already has a run"));
  assert_int_equal(status(session_close(&t, &ta, "a", &err)), SBX_FAILED_PRECONDITION);
  /* Released before its workspace was mounted (nothing ran): forgotten. */
  session_release(&t, s);
  assert_int_equal(session_count(&t), 0);
  assert_int_equal(status(session_reserve(&t, &ta, 0, "a", &s, &created, &err)), SBX_OK);
  assert_true(created);
  session_set_workspace(&t, s, -1, 1000, 1 << 20); /* still unmounted */
  session_release(&t, s);
  session_table_destroy(&t, -1, "/nonexistent");
}

/* A mounted session: fd >= 0. /dev/null stands in for the tmpfs's root. */
static struct session *mounted(struct session_table *t, const char *id, bool *created) {
  struct session *s;
  assert_int_equal(status(session_reserve(t, &ta, 0, id, &s, created, &err)), SBX_OK);
  int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (s->fd < 0)
    session_set_workspace(t, s, fd, 1000, 1 << 20);
  else
    close(fd);
  session_release(t, s);
  return s;
}

static void persists_closes_and_is_new_again(void **state) {
  struct session_table t;
  assert_int_equal(session_table_init(&t, 4, 60000), 0);
  bool created;
  mounted(&t, "a", &created);
  assert_true(created);
  mounted(&t, "a", &created);
  assert_false(created);
  int fd = session_open_workspace(&t, &ta, "a", &err);
  assert_true(fd >= 0);
  close(fd);
  assert_int_equal(session_open_workspace(&t, &ta, "b", &err), -1);
  assert_int_equal(session_close(&t, &ta, "a", &err), 0);
  assert_int_equal(status(session_close(&t, &ta, "a", &err)), SBX_NOT_FOUND);
  assert_non_null(strstr(err.msg, "no session a"));
  assert_int_equal(session_open_workspace(&t, &ta, "a", &err), -1);
  mounted(&t, "a", &created);
  assert_true(created);
  /* The closed one waits for the reaper; the root fd is not a directory,
   * so the unmount fails (logged) but the session is freed. */
  assert_int_equal(session_reap(&t, -1, "/nonexistent"), 1);
  session_table_destroy(&t, -1, "/nonexistent");
}

static void lru_eviction_at_the_cap(void **state) {
  struct session_table t;
  assert_int_equal(session_table_init(&t, 2, 60000), 0);
  bool created;
  mounted(&t, "old", &created);
  sleep_ms(5);
  mounted(&t, "new", &created);
  sleep_ms(5);
  int fd = session_open_workspace(&t, &ta, "old", &err); /* a ListFiles counts as use */
  close(fd);
  sleep_ms(5);
  mounted(&t, "third", &created);
  assert_true(created);
  assert_int_equal(session_count(&t), 2);
  assert_int_equal(session_open_workspace(&t, &ta, "new", &err), -1); /* evicted: least recent */
  fd = session_open_workspace(&t, &ta, "old", &err);
  assert_true(fd >= 0);
  close(fd);
  /* A full table of busy sessions refuses a new one. */
  struct session *a, *b, *c;
  assert_int_equal(status(session_reserve(&t, &ta, 0, "old", &a, &created, &err)), SBX_OK);
  assert_int_equal(status(session_reserve(&t, &ta, 0, "third", &b, &created, &err)), SBX_OK);
  assert_int_equal(status(session_reserve(&t, &ta, 0, "fourth", &c, &created, &err)),
                   SBX_RESOURCE_EXHAUSTED);
  session_release(&t, a);
  session_release(&t, b);
  session_table_destroy(&t, -1, "/nonexistent");
}

static void idle_sessions_expire(void **state) {
  struct session_table t;
  assert_int_equal(session_table_init(&t, 4, 30), 0);
  bool created;
  mounted(&t, "idle", &created);
  struct session *busy;
  assert_int_equal(status(session_reserve(&t, &ta, 0, "busy", &busy, &created, &err)), SBX_OK);
  sleep_ms(60);
  assert_int_equal(session_expire(&t), 1); /* a busy one never expires */
  assert_int_equal(session_open_workspace(&t, &ta, "idle", &err), -1);
  session_release(&t, busy);
  session_table_destroy(&t, -1, "/nonexistent");
}

/* The same id under two tenants is two sessions; neither finds, closes or
 * opens the other's, and the answer for the other's id is the answer for
 * an id nobody has. */
static void tenants_have_their_own_ids(void **state) {
  struct session_table t;
  assert_int_equal(session_table_init(&t, 8, 60000), 0);
  bool created;
  mounted(&t, "demo", &created);
  assert_true(created);
  struct session *s;
  assert_int_equal(status(session_reserve(&t, &tb, 0, "demo", &s, &created, &err)), SBX_OK);
  assert_true(created); /* b's own, not a's */
  session_release(&t, s);
  assert_int_equal(session_open_workspace(&t, &tb, "demo", &err), -1); /* b's has no files */
  assert_int_equal(err.code, SBX_NOT_FOUND);
  char for_other[sizeof err.msg], for_none[sizeof err.msg];
  assert_int_equal(status(session_close(&t, &tb, "demo", &err)), SBX_NOT_FOUND);
  snprintf(for_other, sizeof for_other, "%s", err.msg);
  assert_int_equal(status(session_close(&t, &tb, "demo", &err)), SBX_NOT_FOUND);
  snprintf(for_none, sizeof for_none, "%s", err.msg);
  assert_string_equal(for_other, for_none);
  int fd = session_open_workspace(&t, &ta, "demo", &err); /* a's is untouched */
  assert_true(fd >= 0);
  close(fd);
  assert_int_equal(atomic_load(&ta.sessions), 1);
  assert_int_equal(session_close(&t, &ta, "demo", &err), 0);
  assert_int_equal(atomic_load(&ta.sessions), 0);
  session_reap(&t, -1, "/nonexistent");
  session_table_destroy(&t, -1, "/nonexistent");
}

/* max_sessions caps a tenant's own sessions, not the other's. */
static void tenant_max_sessions(void **state) {
  struct session_table t;
  assert_int_equal(session_table_init(&t, 8, 60000), 0);
  struct session *s;
  bool created;
  for (int i = 0; i < 2; i++) {
    char id[8];
    snprintf(id, sizeof id, "s%d", i);
    assert_int_equal(status(session_reserve(&t, &tb, 2, id, &s, &created, &err)), SBX_OK);
    session_set_workspace(&t, s, open("/dev/null", O_RDONLY | O_CLOEXEC), 1000, 1 << 20);
    session_release(&t, s);
  }
  assert_int_equal(status(session_reserve(&t, &tb, 2, "s2", &s, &created, &err)),
                   SBX_RESOURCE_EXHAUSTED);
  assert_non_null(strstr(err.msg, "tenant b has its 2 sessions (max_sessions)"));
  /* Its existing ones still run. */
  assert_int_equal(status(session_reserve(&t, &tb, 2, "s1", &s, &created, &err)), SBX_OK);
  session_release(&t, s);
  assert_int_equal(status(session_reserve(&t, &ta, 2, "s2", &s, &created, &err)), SBX_OK);
  session_release(&t, s);
  session_table_destroy(&t, -1, "/nonexistent");
}

/* A full table evicts from the tenant holding the most sessions, even when
 * another tenant's idle session is older. */
static void eviction_takes_from_the_biggest_tenant(void **state) {
  struct session_table t;
  assert_int_equal(session_table_init(&t, 3, 60000), 0);
  bool created;
  mounted(&t, "a-old", &created); /* a's, the oldest */
  sleep_ms(5);
  struct session *s;
  for (int i = 0; i < 2; i++) {
    char id[8];
    snprintf(id, sizeof id, "b%d", i);
    assert_int_equal(status(session_reserve(&t, &tb, 0, id, &s, &created, &err)), SBX_OK);
    session_set_workspace(&t, s, open("/dev/null", O_RDONLY | O_CLOEXEC), 1000, 1 << 20);
    session_release(&t, s);
    sleep_ms(5);
  }
  assert_int_equal(status(session_reserve(&t, &tb, 0, "b2", &s, &created, &err)), SBX_OK);
  session_release(&t, s);
  int fd = session_open_workspace(&t, &ta, "a-old", &err);
  assert_true(fd >= 0); /* a's survived */
  close(fd);
  assert_int_equal(session_open_workspace(&t, &tb, "b0", &err), -1); /* b's oldest went */
  session_reap(&t, -1, "/nonexistent");
  session_table_destroy(&t, -1, "/nonexistent");
}

static void ids_validated(void **state) {
  assert_true(id_valid("abc-DEF_1.2"));
  assert_false(id_valid(""));
  assert_false(id_valid("."));
  assert_false(id_valid(".."));
  assert_false(id_valid("a/b"));
  assert_false(id_valid("a\\b"));
  assert_false(id_valid("caf\xc3\xa9"));
  char long_id[80];
  memset(long_id, 'x', 65);
  long_id[65] = '\0';
  assert_false(id_valid(long_id));
  long_id[64] = '\0';
  assert_true(id_valid(long_id));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(create_reserve_release),
      cmocka_unit_test(persists_closes_and_is_new_again),
      cmocka_unit_test(lru_eviction_at_the_cap),
      cmocka_unit_test(idle_sessions_expire),
      cmocka_unit_test(tenants_have_their_own_ids),
      cmocka_unit_test(tenant_max_sessions),
      cmocka_unit_test(eviction_takes_from_the_biggest_tenant),
      cmocka_unit_test(ids_validated),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
