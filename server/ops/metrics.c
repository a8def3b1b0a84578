/* metrics.c: see metrics.h. */
#include "metrics.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

void metrics_write_label_value(FILE *out, const char *value) {
  for (const char *p = value; *p != '\0'; p++) {
    if (*p == '\\')
      fputs("\\\\", out);
    else if (*p == '"')
      fputs("\\\"", out);
    else if (*p == '\n')
      fputs("\\n", out);
    else
      fputc(*p, out);
  }
}

void metrics_write_help(FILE *out, const char *help) {
  for (const char *p = help; *p != '\0'; p++) {
    if (*p == '\\')
      fputs("\\\\", out);
    else if (*p == '\n')
      fputs("\\n", out);
    else
      fputc(*p, out);
  }
}

void metrics_family(FILE *out, const char *name, const char *type, const char *help) {
  fprintf(out, "# HELP %s ", name);
  metrics_write_help(out, help);
  fprintf(out, "\n# TYPE %s %s\n", name, type);
}

/* {a="x",b="y"} (nothing without labels), with an extra label when
 * extra_name is set (a histogram's le). */
static void write_labels(FILE *out, const struct metric_label *labels, size_t n,
                         const char *extra_name, const char *extra_value) {
  if (n == 0 && extra_name == NULL)
    return;
  fputc('{', out);
  for (size_t i = 0; i < n; i++) {
    fprintf(out, "%s%s=\"", i > 0 ? "," : "", labels[i].name);
    metrics_write_label_value(out, labels[i].value);
    fputc('"', out);
  }
  if (extra_name != NULL) {
    fprintf(out, "%s%s=\"", n > 0 ? "," : "", extra_name);
    metrics_write_label_value(out, extra_value);
    fputc('"', out);
  }
  fputc('}', out);
}

void metrics_sample_u64(FILE *out, const char *name, const struct metric_label *labels, size_t n,
                        uint64_t value) {
  fputs(name, out);
  write_labels(out, labels, n, NULL, NULL);
  fprintf(out, " %" PRIu64 "\n", value);
}

void metrics_format_f64(double v, char *buf, size_t len) {
  if (isnan(v)) {
    snprintf(buf, len, "NaN");
  } else if (isinf(v)) {
    snprintf(buf, len, "%s", v > 0 ? "+Inf" : "-Inf");
  } else {
    snprintf(buf, len, "%.15g", v);
    if (strtod(buf, NULL) != v)
      snprintf(buf, len, "%.17g", v);
  }
}

void metrics_sample_f64(FILE *out, const char *name, const struct metric_label *labels, size_t n,
                        double value) {
  char v[40];
  metrics_format_f64(value, v, sizeof(v));
  fputs(name, out);
  write_labels(out, labels, n, NULL, NULL);
  fprintf(out, " %s\n", v);
}

void metrics_format_seconds(uint64_t us, char *buf, size_t len) {
  uint64_t whole = us / 1000000u, frac = us % 1000000u;
  if (frac == 0) {
    snprintf(buf, len, "%" PRIu64, whole);
    return;
  }
  char digits[8];
  snprintf(digits, sizeof(digits), "%06" PRIu64, frac);
  size_t n = strlen(digits);
  while (n > 0 && digits[n - 1] == '0')
    digits[--n] = '\0';
  snprintf(buf, len, "%" PRIu64 ".%s", whole, digits);
}

void metrics_histogram_seconds(FILE *out, const char *name, const struct metric_label *labels,
                               size_t n, const struct stats_histogram_read *h) {
  char le[32];
  for (size_t i = 0; i <= h->n_bounds; i++) {
    if (i < h->n_bounds)
      metrics_format_seconds(h->bounds_us[i], le, sizeof(le));
    else
      snprintf(le, sizeof(le), "+Inf");
    fprintf(out, "%s_bucket", name);
    write_labels(out, labels, n, "le", le);
    fprintf(out, " %" PRIu64 "\n", h->cumulative[i]);
  }
  char sum[40];
  metrics_format_seconds(h->sum_us, sum, sizeof(sum));
  fprintf(out, "%s_sum", name);
  write_labels(out, labels, n, NULL, NULL);
  fprintf(out, " %s\n%s_count", sum, name);
  write_labels(out, labels, n, NULL, NULL);
  fprintf(out, " %" PRIu64 "\n", h->count);
}
