/* stats.h: the counters and histograms the layers keep about their own work
 * (runs, queue waits, environment builds), for operations: server/ops/
 * reads them for /metrics. Recording is one or two relaxed atomic adds, no
 * lock and no allocation, so any thread on the hot path may record. A
 * reader sees each value exactly, but not the set as one snapshot: a scrape
 * may see a bucket counted before the sum that goes with it, which
 * Prometheus tolerates. Values are integers (microseconds), so recording
 * never touches floating point; ops/ writes them in seconds. */
#ifndef SBX_STATS_H
#define SBX_STATS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define STATS_BUCKETS_MAX 16

/* Upper bounds (inclusive, ascending, microseconds) for durations of a run
 * or a wait: 1 ms to 5 minutes. */
extern const uint64_t stats_bounds_run_us[];
extern const size_t stats_bounds_run_n;
/* For environment builds (pip): 0.5 s to 30 minutes. */
extern const uint64_t stats_bounds_build_us[];
extern const size_t stats_bounds_build_n;

struct stats_histogram {
  const uint64_t *bounds_us; /* n_bounds upper bounds; one more bucket above the last */
  size_t n_bounds;
  atomic_uint_fast64_t counts[STATS_BUCKETS_MAX + 1]; /* per bucket, not cumulative */
  atomic_uint_fast64_t sum_us;
};

/* A histogram as a reader copies it: cumulative counts as Prometheus writes
 * them (cumulative[i]: observations <= bounds_us[i]; cumulative[n_bounds]:
 * all of them, which is also count, so the two always agree). */
struct stats_histogram_read {
  const uint64_t *bounds_us;
  size_t n_bounds;
  uint64_t cumulative[STATS_BUCKETS_MAX + 1];
  uint64_t count;
  uint64_t sum_us;
};

/* Before any thread records: bounds (at most STATS_BUCKETS_MAX, ascending)
 * must outlive h. Zeroes the counts. */
void stats_histogram_init(struct stats_histogram *h, const uint64_t *bounds_us, size_t n_bounds);
void stats_histogram_observe_us(struct stats_histogram *h, uint64_t us);
void stats_histogram_read(const struct stats_histogram *h, struct stats_histogram_read *out);

/* The bucket value v falls in: the first i with v <= bounds[i], n above
 * the last. */
size_t stats_bucket_index(const uint64_t *bounds, size_t n, uint64_t v);

#endif
