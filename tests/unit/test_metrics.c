/* The Prometheus exposition (server/ops/metrics.c): escaping of label values
 * and HELP text, samples, histograms (bucket math in server/stats.c:
 * inclusive upper bounds, cumulative counts, +Inf, _sum in seconds,
 * _count), number formats; atomic recording from several threads; and the
 * operations listener's route matching. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http.h"
#include "metrics.h"
#include "stats.h"

/* What f wrote into a memstream, as a string (the test frees it). */
struct capture {
  char *text;
  size_t len;
  FILE *out;
};

static void capture_open(struct capture *c) {
  c->text = NULL;
  c->out = open_memstream(&c->text, &c->len);
  assert_non_null(c->out);
}

static char *capture_close(struct capture *c) {
  fclose(c->out);
  return c->text;
}

static void label_values_escaped(void **state) {
  struct capture c;
  capture_open(&c);
  struct metric_label l[] = {{"path", "a\\b\"c\nd"}, {"plain", "x y=z,{}"}};
  metrics_sample_u64(c.out, "m_total", l, 2, 7);
  char *t = capture_close(&c);
  assert_string_equal(t, "m_total{path=\"a\\\\b\\\"c\\nd\",plain=\"x y=z,{}\"} 7\n");
  free(t);
}

static void help_escaped_type_written(void **state) {
  struct capture c;
  capture_open(&c);
  metrics_family(c.out, "m", "gauge", "back\\slash \"quote\" and\nnewline");
  char *t = capture_close(&c);
  /* HELP escapes backslash and newline only; quotes stay as they are. */
  assert_string_equal(t, "# HELP m back\\\\slash \"quote\" and\\nnewline\n# TYPE m gauge\n");
  free(t);
}

static void samples_without_labels(void **state) {
  struct capture c;
  capture_open(&c);
  metrics_sample_u64(c.out, "a", NULL, 0, 18446744073709551615ULL);
  metrics_sample_f64(c.out, "b", NULL, 0, 0.1);
  metrics_sample_f64(c.out, "c", NULL, 0, NAN);
  metrics_sample_f64(c.out, "d", NULL, 0, -INFINITY);
  metrics_sample_f64(c.out, "e", NULL, 0, 1795448354.53);
  char *t = capture_close(&c);
  assert_string_equal(t, "a 18446744073709551615\nb 0.1\nc NaN\nd -Inf\ne 1795448354.53\n");
  free(t);
}

static void seconds_exact(void **state) {
  char b[32];
  const struct {
    uint64_t us;
    const char *text;
  } cases[] = {{0, "0"},         {1, "0.000001"},       {1000, "0.001"}, {2500000, "2.5"},
               {60000000, "60"}, {1234567, "1.234567"}, {100000, "0.1"}, {10500000, "10.5"}};
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    metrics_format_seconds(cases[i].us, b, sizeof b);
    assert_string_equal(b, cases[i].text);
  }
}

static void bucket_index(void **state) {
  const uint64_t bounds[] = {10, 20, 30};
  assert_int_equal(stats_bucket_index(bounds, 3, 0), 0);
  assert_int_equal(stats_bucket_index(bounds, 3, 10), 0); /* upper bounds are inclusive */
  assert_int_equal(stats_bucket_index(bounds, 3, 11), 1);
  assert_int_equal(stats_bucket_index(bounds, 3, 20), 1);
  assert_int_equal(stats_bucket_index(bounds, 3, 30), 2);
  assert_int_equal(stats_bucket_index(bounds, 3, 31), 3); /* above the last: +Inf only */
  assert_int_equal(stats_bucket_index(bounds, 0, 5), 0);  /* no bounds: everything in +Inf */
  for (uint64_t v = 0; v < 40; v++) {                     /* against a linear scan */
    size_t want = 0;
    while (want < 3 && bounds[want] < v)
      want++;
    assert_int_equal(stats_bucket_index(bounds, 3, v), want);
  }
}

static void histogram_exposition(void **state) {
  static const uint64_t bounds[] = {1000, 2500000, 60000000};
  struct stats_histogram h;
  stats_histogram_init(&h, bounds, 3);
  const uint64_t observed[] = {0, 1000, 1001, 2500000, 100000000};
  for (size_t i = 0; i < 5; i++)
    stats_histogram_observe_us(&h, observed[i]);
  struct stats_histogram_read r;
  stats_histogram_read(&h, &r);
  assert_int_equal(r.count, 5);
  assert_int_equal(r.cumulative[3], r.count); /* +Inf is the count */
  struct capture c;
  capture_open(&c);
  struct metric_label l[] = {{"kind", "x"}};
  metrics_histogram_seconds(c.out, "t_seconds", l, 1, &r);
  char *t = capture_close(&c);
  assert_string_equal(t, "t_seconds_bucket{kind=\"x\",le=\"0.001\"} 2\n"
                         "t_seconds_bucket{kind=\"x\",le=\"2.5\"} 4\n"
                         "t_seconds_bucket{kind=\"x\",le=\"60\"} 4\n"
                         "t_seconds_bucket{kind=\"x\",le=\"+Inf\"} 5\n"
                         "t_seconds_sum{kind=\"x\"} 102.502001\n"
                         "t_seconds_count{kind=\"x\"} 5\n");
  free(t);
  capture_open(&c);
  stats_histogram_init(&h, bounds, 3);
  stats_histogram_read(&h, &r);
  metrics_histogram_seconds(c.out, "e_seconds", NULL, 0, &r);
  t = capture_close(&c);
  assert_string_equal(t, "e_seconds_bucket{le=\"0.001\"} 0\ne_seconds_bucket{le=\"2.5\"} 0\n"
                         "e_seconds_bucket{le=\"60\"} 0\ne_seconds_bucket{le=\"+Inf\"} 0\n"
                         "e_seconds_sum 0\ne_seconds_count 0\n");
  free(t);
}

static void buckets_in_use(void **state) {
  /* The server's bucket sets: ascending, within the cap. */
  assert_true(stats_bounds_run_n <= STATS_BUCKETS_MAX && stats_bounds_build_n <= STATS_BUCKETS_MAX);
  for (size_t i = 1; i < stats_bounds_run_n; i++)
    assert_true(stats_bounds_run_us[i - 1] < stats_bounds_run_us[i]);
  for (size_t i = 1; i < stats_bounds_build_n; i++)
    assert_true(stats_bounds_build_us[i - 1] < stats_bounds_build_us[i]);
}

#define THREADS 4
#define PER_THREAD 100000

static void *observer(void *arg) {
  for (uint64_t i = 0; i < PER_THREAD; i++)
    stats_histogram_observe_us(arg, i % 3 == 0 ? 500 : 2000000);
  return NULL;
}

/* Lock-free recording loses nothing under contention. */
static void concurrent_observations(void **state) {
  static struct stats_histogram h;
  stats_histogram_init(&h, stats_bounds_run_us, stats_bounds_run_n);
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++)
    assert_int_equal(pthread_create(&t[i], NULL, observer, &h), 0);
  for (int i = 0; i < THREADS; i++)
    pthread_join(t[i], NULL);
  struct stats_histogram_read r;
  stats_histogram_read(&h, &r);
  uint64_t small = THREADS * ((PER_THREAD + 2) / 3), big = THREADS * PER_THREAD - small;
  assert_int_equal(r.count, THREADS * PER_THREAD);
  assert_int_equal(r.cumulative[0], small); /* le 0.001 */
  assert_int_equal(r.sum_us, small * 500 + big * 2000000);
}

static void noop(void *ctx, const struct http_request *req, struct http_response *resp) {
}

static void route_matching(void **state) {
  struct http_listener l = {0};
  struct sbx_error err;
  assert_int_equal(http_listener_route(&l, "/metrics", HTTP_GET, noop, NULL, &err), 0);
  assert_int_equal(http_listener_route(&l, "/api/", HTTP_GET, noop, NULL, &err), 0);
  assert_int_equal(http_listener_route(&l, "/api/v2/", HTTP_GET, noop, NULL, &err), 0);
  assert_int_equal(http_listener_route(&l, "/metrics", HTTP_GET, noop, NULL, &err), -1);
  assert_int_equal(http_listener_route(&l, "relative", HTTP_GET, noop, NULL, &err), -1);
  const struct http_route *r = l.routes;
  assert_ptr_equal(http_route_match(r, l.n_routes, "/metrics"), &r[0]);
  assert_null(http_route_match(r, l.n_routes, "/metrics/x")); /* exact routes are exact */
  assert_null(http_route_match(r, l.n_routes, "/metric"));
  assert_ptr_equal(http_route_match(r, l.n_routes, "/api/v1/x"), &r[1]);
  assert_ptr_equal(http_route_match(r, l.n_routes, "/api/v2/execute"), &r[2]); /* longest */
  assert_ptr_equal(http_route_match(r, l.n_routes, "/api/v2/"), &r[2]);
  assert_null(http_route_match(r, l.n_routes, "/"));
  assert_null(http_route_match(r, l.n_routes, ""));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(label_values_escaped),   cmocka_unit_test(help_escaped_type_written),
      cmocka_unit_test(samples_without_labels), cmocka_unit_test(seconds_exact),
      cmocka_unit_test(bucket_index),           cmocka_unit_test(histogram_exposition),
      cmocka_unit_test(buckets_in_use),         cmocka_unit_test(concurrent_observations),
      cmocka_unit_test(route_matching),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
