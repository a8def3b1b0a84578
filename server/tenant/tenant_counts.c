/* tenant_counts.c: see tenant_counts.h. */
#include "tenant_counts.h"

#include <stdlib.h>

/* Two first counts at once: one row wins, the other is freed. */
bool tenant_counts_add(struct tenant_counts *c, size_t n, int tenant, size_t i) {
  if (tenant < 0 || tenant >= TENANTS_MAX || i >= n)
    return false;
  atomic_uint_fast64_t *row = atomic_load_explicit(&c->rows[tenant], memory_order_acquire);
  if (row == NULL) {
    atomic_uint_fast64_t *made = calloc(n, sizeof(*made)), *expected = NULL;
    if (made == NULL)
      return false;
    if (atomic_compare_exchange_strong_explicit(&c->rows[tenant], &expected, made,
                                                memory_order_acq_rel, memory_order_acquire)) {
      row = made;
    } else {
      free(made);
      row = expected;
    }
  }
  atomic_fetch_add_explicit(&row[i], 1, memory_order_relaxed);
  return true;
}

const atomic_uint_fast64_t *tenant_counts_row(const struct tenant_counts *c, unsigned tenant) {
  if (tenant >= TENANTS_MAX)
    return NULL;
  return atomic_load_explicit(&c->rows[tenant], memory_order_acquire);
}

void tenant_counts_destroy(struct tenant_counts *c) {
  for (size_t i = 0; i < TENANTS_MAX; i++)
    free(atomic_exchange(&c->rows[i], NULL));
}
