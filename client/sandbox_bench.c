/* sandbox-bench: a load generator for sandboxd. N threads, each with its own
 * nng context on one socket, send RunCode requests cycling through the
 * given scripts; no retries, so RESOURCE_EXHAUSTED shows up in the counts.
 * Prints throughput, p50/p90/p99/max latency, counts by status and by
 * killed_by. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "json.h"
#include "sandbox_client.h"

#define MAX_STATUS 17
#define MAX_KILLED 5

struct bench {
  sbxc_client *client;
  sbxc_request **requests;
  size_t n_requests_kinds;
  long total;        /* --requests; -1 with a duration */
  double duration_s; /* --duration; 0 with a count */
  atomic_long next;  /* requests handed out */
  double start;
  pthread_mutex_t lock;
  double *latencies_ms;
  size_t n_lat, cap_lat;
  long by_status[MAX_STATUS];
  long by_killed[MAX_KILLED];
};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *bench_thread(void *arg) {
  struct bench *b = arg;
  for (;;) {
    long i = atomic_fetch_add(&b->next, 1);
    if (b->total >= 0 && i >= b->total)
      break;
    if (b->total < 0 && now_s() - b->start >= b->duration_s)
      break;
    const sbxc_request *req = b->requests[(size_t)i % b->n_requests_kinds];
    double t0 = now_s();
    struct sbxc_result r;
    sbxc_run_code(b->client, req, &r);
    double ms = (now_s() - t0) * 1000.0;
    pthread_mutex_lock(&b->lock);
    if (b->n_lat == b->cap_lat) {
      size_t cap = b->cap_lat ? b->cap_lat * 2 : 1024;
      double *p = realloc(b->latencies_ms, cap * sizeof(double));
      if (p != NULL) {
        b->latencies_ms = p;
        b->cap_lat = cap;
      }
    }
    if (b->n_lat < b->cap_lat)
      b->latencies_ms[b->n_lat++] = ms;
    b->by_status[r.status >= 0 && r.status < MAX_STATUS ? r.status : 2]++;
    if (r.status == SBXC_OK && r.killed_by >= 0 && r.killed_by < MAX_KILLED)
      b->by_killed[r.killed_by]++;
    pthread_mutex_unlock(&b->lock);
    sbxc_result_free(&r);
  }
  return NULL;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double percentile(const double *sorted, size_t n, double p) {
  if (n == 0)
    return 0;
  size_t idx = (size_t)(p / 100.0 * (double)(n - 1) + 0.5);
  return sorted[idx < n ? idx : n - 1];
}

static int load_script(const char *path, sbxc_request **out) {
  FILE *f = fopen(path, "re");
  if (f == NULL)
    return -1;
  char *buf = NULL;
  size_t len = 0;
  FILE *mem = open_memstream(&buf, &len);
  char chunk[4096];
  size_t n;
  while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
    fwrite(chunk, 1, n, mem);
  fclose(f);
  fclose(mem);
  sbxc_request *r = sbxc_request_new();
  if (r == NULL || sbxc_request_set_code(r, buf, len) < 0) {
    free(buf);
    sbxc_request_free(r);
    errno = ENOMEM;
    return -1;
  }
  free(buf);
  *out = r;
  return 0;
}

/* The summary as one JSON object: counts by status and by killed_by name. */
static void print_summary_json(const struct bench *b, long concurrency, double elapsed, double rps,
                               const double pct[4]) {
  json_t *status = json_object(), *killed = json_object();
  for (int s = 0; s < MAX_STATUS; s++)
    if (b->by_status[s] > 0)
      json_object_set_new(status, sbxc_status_name(s), json_integer(b->by_status[s]));
  for (int k = 0; k < MAX_KILLED; k++)
    if (b->by_killed[k] > 0)
      json_object_set_new(killed, sbxc_killed_by_name(k), json_integer(b->by_killed[k]));
  char *text = sbxc_json_dump(
      json_pack("{s:I, s:I, s:f, s:f, s:{s:f, s:f, s:f, s:f}, s:o, s:o}", "requests",
                (json_int_t)b->n_lat, "concurrency", (json_int_t)concurrency, "elapsed_s", elapsed,
                "throughput_rps", rps, "latency_ms", "p50", pct[0], "p90", pct[1], "p99", pct[2],
                "max", pct[3], "status", status, "killed_by", killed));
  if (text != NULL)
    puts(text);
  free(text);
}

struct options {
  const char *url;
  long concurrency, requests, timeout_ms;
  double duration;
  bool json;
};

/* A whole number for flag, or -1 with a message (nothing partial: "2x"). */
static int parse_long(const char *flag, const char *text, long *out) {
  char *end;
  errno = 0;
  *out = strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0') {
    fprintf(stderr, "sandbox-bench: --%s: \"%s\" is not a whole number\n", flag, text);
    return -1;
  }
  return 0;
}

/* 0 to go on, else the exit code: 0 after --help, 2 for bad arguments. */
static int parse_options(int argc, char **argv, struct options *o) {
  static const struct option opts[] = {
      {"endpoint", required_argument, NULL, 'e'},
      {"concurrency", required_argument, NULL, 'c'},
      {"requests", required_argument, NULL, 'n'},
      {"duration", required_argument, NULL, 'd'},
      {"timeout-ms", required_argument, NULL, 't'},
      {"json", no_argument, NULL, 'j'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0},
  };
  const char *env = getenv("SANDBOX_URL");
  *o = (struct options){.url = env != NULL && env[0] != '\0' ? env : "tcp://127.0.0.1:7878",
                        .concurrency = 1,
                        .requests = -1};
  int c, bad = 0;
  while ((c = getopt_long(argc, argv, "e:c:n:d:t:jh", opts, NULL)) != -1) {
    char *end;
    switch (c) {
    case 'e':
      o->url = optarg;
      break;
    case 'c':
      bad |= parse_long("concurrency", optarg, &o->concurrency);
      break;
    case 'n':
      bad |= parse_long("requests", optarg, &o->requests);
      break;
    case 'd':
      o->duration = strtod(optarg, &end);
      if (end == optarg || *end != '\0')
        bad = -1, fprintf(stderr, "sandbox-bench: --duration: \"%s\" is not a number\n", optarg);
      break;
    case 't':
      bad |= parse_long("timeout-ms", optarg, &o->timeout_ms);
      break;
    case 'j':
      o->json = true;
      break;
    case 'h':
      printf("usage: sandbox-bench [-e URL] [--concurrency N] [--requests N | --duration S]\n"
             "                     [--timeout-ms N] [--json] SCRIPT...\n");
      return -1;
    default:
      return 2;
    }
  }
  if (bad != 0)
    return 2;
  if (optind >= argc || o->concurrency < 1 || o->concurrency > 4096 || o->timeout_ms < 0 ||
      (o->requests < 0 && o->duration <= 0) || (o->requests >= 0 && o->duration > 0)) {
    fprintf(stderr, "sandbox-bench: need SCRIPT..., --concurrency 1..4096 and one of "
                    "--requests N or --duration S (see --help)\n");
    return 2;
  }
  return 0;
}

/* One request per script, each with the timeout. */
static int load_requests(struct bench *b, char **paths, size_t n, long timeout_ms) {
  b->n_requests_kinds = n;
  b->requests = calloc(n, sizeof(*b->requests));
  if (b->requests == NULL)
    return -1;
  for (size_t i = 0; i < n; i++) {
    if (load_script(paths[i], &b->requests[i]) < 0) {
      fprintf(stderr, "sandbox-bench: %s: %s\n", paths[i], strerror(errno));
      return -1;
    }
    struct sbxc_limits limits = {.timeout_ms = timeout_ms};
    sbxc_request_set_limits(b->requests[i], &limits);
  }
  return 0;
}

/* Runs the threads to the end; the elapsed seconds. */
static double run_threads(struct bench *b, long concurrency) {
  pthread_t *threads = calloc((size_t)concurrency, sizeof(pthread_t));
  if (threads == NULL)
    return 0;
  b->start = now_s();
  long started = 0;
  while (started < concurrency && pthread_create(&threads[started], NULL, bench_thread, b) == 0)
    started++;
  if (started < concurrency)
    fprintf(stderr, "sandbox-bench: only %ld of %ld threads started\n", started, concurrency);
  for (long i = 0; i < started; i++)
    pthread_join(threads[i], NULL);
  free(threads);
  return now_s() - b->start;
}

static void print_summary_text(const struct bench *b, long concurrency, double elapsed, double rps,
                               const double pct[4]) {
  printf("requests: %zu  concurrency: %ld  elapsed: %.2f s  throughput: %.2f req/s\n", b->n_lat,
         concurrency, elapsed, rps);
  printf("latency ms: p50 %.2f  p90 %.2f  p99 %.2f  max %.2f\n", pct[0], pct[1], pct[2], pct[3]);
  printf("status:");
  for (int s = 0; s < MAX_STATUS; s++)
    if (b->by_status[s] > 0)
      printf(" %s=%ld", sbxc_status_name(s), b->by_status[s]);
  printf("\nkilled_by:");
  for (int k = 0; k < MAX_KILLED; k++)
    if (b->by_killed[k] > 0)
      printf(" %s=%ld", sbxc_killed_by_name(k), b->by_killed[k]);
  printf("\n");
}

static void free_bench(struct bench *b) {
  sbxc_client_close(b->client);
  for (size_t i = 0; b->requests != NULL && i < b->n_requests_kinds; i++)
    sbxc_request_free(b->requests[i]);
  free(b->requests);
  free(b->latencies_ms);
}

int main(int argc, char **argv) {
  struct options o;
  int rv = parse_options(argc, argv, &o);
  if (rv != 0)
    return rv < 0 ? 0 : rv;
  static struct bench b;
  b.total = o.requests;
  b.duration_s = o.duration;
  pthread_mutex_init(&b.lock, NULL);
  char err[512];
  if (load_requests(&b, argv + optind, (size_t)(argc - optind), o.timeout_ms) < 0) {
    free_bench(&b);
    return 2;
  }
  if (sbxc_client_open(&b.client, o.url, err, sizeof(err)) < 0) {
    fprintf(stderr, "sandbox-bench: %s\n", err);
    free_bench(&b);
    return 1;
  }
  sbxc_client_set_retries(b.client, 0);
  double elapsed = run_threads(&b, o.concurrency);
  qsort(b.latencies_ms, b.n_lat, sizeof(double), cmp_double);
  const double pct[4] = {
      percentile(b.latencies_ms, b.n_lat, 50), percentile(b.latencies_ms, b.n_lat, 90),
      percentile(b.latencies_ms, b.n_lat, 99), b.n_lat ? b.latencies_ms[b.n_lat - 1] : 0};
  double rps = elapsed > 0 ? (double)b.n_lat / elapsed : 0;
  if (o.json)
    print_summary_json(&b, o.concurrency, elapsed, rps, pct);
  else
    print_summary_text(&b, o.concurrency, elapsed, rps, pct);
  int ok = b.by_status[SBXC_OK] == (long)b.n_lat;
  free_bench(&b);
  return ok ? 0 : 1;
}
