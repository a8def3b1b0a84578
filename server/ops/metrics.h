/* metrics.h: Prometheus' text exposition format, version 0.0.4: a family's
 * HELP and TYPE lines, its samples, histograms (cumulative buckets with an
 * "le" label, _sum, _count), label values and HELP text escaped. Writes to
 * a FILE (an open_memstream buffer); knows nothing of the server. */
#ifndef SBX_OPS_METRICS_H
#define SBX_OPS_METRICS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "stats.h"

#define METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

struct metric_label {
  const char *name;
  const char *value;
};

/* "# HELP name help" (help escaped) and "# TYPE name type". */
void metrics_family(FILE *out, const char *name, const char *type, const char *help);

/* name{labels} value; no braces without labels. */
void metrics_sample_u64(FILE *out, const char *name, const struct metric_label *labels, size_t n,
                        uint64_t value);
void metrics_sample_f64(FILE *out, const char *name, const struct metric_label *labels, size_t n,
                        double value);

/* name_bucket{labels,le="..."} for each bound and +Inf, name_sum (seconds)
 * and name_count. */
void metrics_histogram_seconds(FILE *out, const char *name, const struct metric_label *labels,
                               size_t n, const struct stats_histogram_read *h);

/* A label value as the format quotes it: backslash, double quote and
 * newline escaped (\\, \", \n); every other byte as it is. */
void metrics_write_label_value(FILE *out, const char *value);
/* HELP text: backslash and newline escaped. */
void metrics_write_help(FILE *out, const char *help);

/* Microseconds as seconds in the shortest exact decimal: 2500000 -> "2.5",
 * 1000 -> "0.001", 60000000 -> "60". */
void metrics_format_seconds(uint64_t us, char *buf, size_t len);
/* A float as Go's Prometheus client writes it: "+Inf", "-Inf", "NaN", or
 * the shortest of %.15g / %.17g that reads back the same. */
void metrics_format_f64(double v, char *buf, size_t len);

#endif
