/* tenant_counts.h: counters by tenant, for the tenant label of /metrics
 * (server/ops/collect.c). A table holds one row of n counters per tenant
 * index (tenants.h: stable, below TENANTS_MAX, one per tenant ever loaded),
 * made at the tenant's first count, so a server pays only for the tenants
 * that use it and the series stay bounded by the tenants file. Counting is
 * one relaxed atomic add (a first count: one calloc and a compare-and-swap);
 * a zeroed table is an empty one. Must never: block, or count past a row's
 * n counters. */
#ifndef SBX_TENANT_COUNTS_H
#define SBX_TENANT_COUNTS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "tenants.h"

struct tenant_counts {
  _Atomic(atomic_uint_fast64_t *) rows[TENANTS_MAX]; /* NULL until the first count */
};

/* Adds one to counter i (< n, the table's row size) of the tenant's row.
 * false when there is no row for it (tenant < 0 or past TENANTS_MAX, or out
 * of memory): the caller counts it where calls of no tenant go. */
bool tenant_counts_add(struct tenant_counts *c, size_t n, int tenant, size_t i);
/* The tenant's row of n counters (relaxed loads), NULL before its first
 * count. */
const atomic_uint_fast64_t *tenant_counts_row(const struct tenant_counts *c, unsigned tenant);
void tenant_counts_destroy(struct tenant_counts *c);

#endif
