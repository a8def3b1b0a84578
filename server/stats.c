/* stats.c: see stats.h. */
#include "stats.h"

#define MS 1000ULL
#define S (1000ULL * MS)

const uint64_t stats_bounds_run_us[] = {
    1 * MS, 5 * MS,    10 * MS, 25 * MS, 50 * MS, 100 * MS, 250 * MS, 500 * MS,
    1 * S,  2500 * MS, 5 * S,   10 * S,  30 * S,  60 * S,   300 * S,
};
const size_t stats_bounds_run_n = sizeof(stats_bounds_run_us) / sizeof(stats_bounds_run_us[0]);

const uint64_t stats_bounds_build_us[] = {
    500 * MS, 1 * S, 2500 * MS, 5 * S, 10 * S, 30 * S, 60 * S, 120 * S, 300 * S, 600 * S, 1800 * S,
};
const size_t stats_bounds_build_n =
    sizeof(stats_bounds_build_us) / sizeof(stats_bounds_build_us[0]);

_Static_assert(sizeof(stats_bounds_run_us) / sizeof(uint64_t) <= STATS_BUCKETS_MAX,
               "run buckets fit");
_Static_assert(sizeof(stats_bounds_build_us) / sizeof(uint64_t) <= STATS_BUCKETS_MAX,
               "build buckets fit");

void stats_histogram_init(struct stats_histogram *h, const uint64_t *bounds_us, size_t n_bounds) {
  h->bounds_us = bounds_us;
  h->n_bounds = n_bounds <= STATS_BUCKETS_MAX ? n_bounds : STATS_BUCKETS_MAX;
  for (size_t i = 0; i <= STATS_BUCKETS_MAX; i++)
    atomic_init(&h->counts[i], 0);
  atomic_init(&h->sum_us, 0);
}

size_t stats_bucket_index(const uint64_t *bounds, size_t n, uint64_t v) {
  /* Binary search for the first bound >= v. */
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (bounds[mid] < v)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

void stats_histogram_observe_us(struct stats_histogram *h, uint64_t us) {
  size_t i = stats_bucket_index(h->bounds_us, h->n_bounds, us);
  atomic_fetch_add_explicit(&h->counts[i], 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&h->sum_us, us, memory_order_relaxed);
}

void stats_histogram_read(const struct stats_histogram *h, struct stats_histogram_read *out) {
  out->bounds_us = h->bounds_us;
  out->n_bounds = h->n_bounds;
  uint64_t total = 0;
  for (size_t i = 0; i <= h->n_bounds; i++) {
    total += atomic_load_explicit(&h->counts[i], memory_order_relaxed);
    out->cumulative[i] = total;
  }
  out->count = total;
  out->sum_us = atomic_load_explicit(&h->sum_us, memory_order_relaxed);
}
