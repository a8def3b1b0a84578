/* tenant_counts: a row per tenant index made at its first count, counts
 * refused (false) past the table or the row, racing first counts that lose
 * nothing, and rpc_stats' answers by tenant on top of it. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <pthread.h>
#include <stdlib.h>

#include "rpc_stats.h"
#include "tenant_counts.h"

#define ROW 6

static void rows_made_at_first_count(void **state) {
  (void)state;
  struct tenant_counts *c = calloc(1, sizeof(*c));
  assert_non_null(c);
  assert_null(tenant_counts_row(c, 3));
  assert_true(tenant_counts_add(c, ROW, 3, 1));
  assert_true(tenant_counts_add(c, ROW, 3, 1));
  assert_true(tenant_counts_add(c, ROW, 3, 5));
  const atomic_uint_fast64_t *row = tenant_counts_row(c, 3);
  assert_non_null(row);
  assert_int_equal(atomic_load(&row[1]), 2);
  assert_int_equal(atomic_load(&row[5]), 1);
  assert_int_equal(atomic_load(&row[0]), 0);
  assert_null(tenant_counts_row(c, 2)); /* another tenant: no row yet */
  tenant_counts_destroy(c);
  assert_null(tenant_counts_row(c, 3));
  free(c);
}

static void refused_past_the_table(void **state) {
  (void)state;
  struct tenant_counts *c = calloc(1, sizeof(*c));
  assert_non_null(c);
  assert_false(tenant_counts_add(c, ROW, -1, 0));          /* no tenant */
  assert_false(tenant_counts_add(c, ROW, TENANTS_MAX, 0)); /* past the table */
  assert_false(tenant_counts_add(c, ROW, 0, ROW));         /* past the row */
  assert_true(tenant_counts_add(c, ROW, TENANTS_MAX - 1, ROW - 1));
  assert_null(tenant_counts_row(c, TENANTS_MAX));
  assert_null(tenant_counts_row(c, 0)); /* the refused count made no row */
  tenant_counts_destroy(c);
  free(c);
}

#define THREADS 4
#define PER_THREAD 20000

static void *count_many(void *arg) {
  struct tenant_counts *c = arg;
  for (int i = 0; i < PER_THREAD; i++)
    tenant_counts_add(c, ROW, i % 8, 0);
  return NULL;
}

/* Threads racing for each tenant's first count: one row wins, no count is
 * lost (LeakSanitizer: the losers' rows are freed). */
static void racing_first_counts(void **state) {
  (void)state;
  struct tenant_counts *c = calloc(1, sizeof(*c));
  assert_non_null(c);
  pthread_t th[THREADS];
  for (int i = 0; i < THREADS; i++)
    assert_int_equal(pthread_create(&th[i], NULL, count_many, c), 0);
  for (int i = 0; i < THREADS; i++)
    pthread_join(th[i], NULL);
  for (unsigned t = 0; t < 8; t++)
    assert_int_equal(atomic_load(&tenant_counts_row(c, t)[0]), THREADS * PER_THREAD / 8);
  tenant_counts_destroy(c);
  free(c);
}

static void rpc_stats_by_tenant(void **state) {
  (void)state;
  struct rpc_stats *s = calloc(1, sizeof(*s));
  assert_non_null(s);
  rpc_stats_reply(s, 2, 0, 0);  /* tenant 2, method 0, OK */
  rpc_stats_reply(s, 2, -1, 3); /* tenant 2, unknown method */
  rpc_stats_reply(s, -1, 1, 0); /* no tenant */
  const atomic_uint_fast64_t *row = tenant_counts_row(&s->by_tenant, 2);
  assert_non_null(row);
  assert_int_equal(atomic_load(&row[0]), 1);
  assert_int_equal(atomic_load(&row[RPC_STATS_METHODS * RPC_STATS_CODES + 3]), 1);
  assert_int_equal(atomic_load(&s->replies[1][0]), 1);
  assert_int_equal(atomic_load(&s->replies[0][0]), 0); /* the tenant's is not here */
  rpc_stats_destroy(s);
  free(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(rows_made_at_first_count),
      cmocka_unit_test(refused_past_the_table),
      cmocka_unit_test(racing_first_counts),
      cmocka_unit_test(rpc_stats_by_tenant),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
