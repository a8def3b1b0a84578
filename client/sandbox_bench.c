/* sandbox-bench: a load generator for sandboxd. N threads, each call on its
 * own nng context, send RunCode requests cycling through the given scripts
 * to one server or a fleet (-e repeated); no retries, so RESOURCE_EXHAUSTED
 * shows up in the counts. Prints throughput, p50/p90/p99/max latency, counts
 * by status and by killed_by; --record writes one JSON line per call (where
 * it went, how it ended). --stream makes each call a StartRun and the
 * WatchRun loop (sbxc_follow_run) instead of one RunCode. */
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

#include "cli_endpoints.h"
#include "json.h"
#include "sandbox_client.h"

#define MAX_STATUS 17
#define MAX_KILLED 6

struct bench {
  sbxc_client *client;
  sbxc_request **requests; /* one per script */
  char **codes;            /* the scripts' bytes */
  size_t *code_lens;
  size_t n_requests_kinds;
  long timeout_ms;
  const char *run_id_prefix; /* NULL: the server names each run */
  FILE *record;              /* NULL: no per-call lines */
  bool stream;               /* StartRun + WatchRun instead of RunCode */
  const char *runtime;       /* NULL: the server's default ("python") */
  long total;                /* --requests; -1 with a duration */
  double duration_s;         /* --duration; 0 with a count */
  atomic_long next;          /* requests handed out */
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

/* The bytes of the file at path, in *code (malloc'd). Returns 0 or -1. */
static int load_script(const char *path, char **code, size_t *len) {
  FILE *f = fopen(path, "re");
  if (f == NULL)
    return -1;
  char *buf = NULL;
  size_t n, total = 0;
  FILE *mem = open_memstream(&buf, &total);
  char chunk[4096];
  int rv = mem != NULL ? 0 : -1;
  while (rv == 0 && (n = fread(chunk, 1, sizeof(chunk), f)) > 0)
    if (fwrite(chunk, 1, n, mem) != n)
      rv = -1;
  if (ferror(f))
    rv = -1;
  fclose(f);
  if (mem != NULL && fclose(mem) != 0)
    rv = -1;
  if (rv < 0) {
    free(buf);
    return -1;
  }
  *code = buf;
  *len = total;
  return 0;
}

/* A RunCode request for script kind k (run_id NULL: the server names it). */
static sbxc_request *build_request(const struct bench *b, size_t k, const char *run_id) {
  sbxc_request *r = sbxc_request_new();
  struct sbxc_limits limits = {.timeout_ms = b->timeout_ms};
  if (r == NULL || sbxc_request_set_code(r, b->codes[k], b->code_lens[k]) < 0 ||
      (run_id != NULL && sbxc_request_set_run_id(r, run_id) < 0) ||
      (b->runtime != NULL && sbxc_request_set_runtime(r, b->runtime) < 0)) {
    sbxc_request_free(r);
    return NULL;
  }
  sbxc_request_set_limits(r, &limits);
  return r;
}

/* The request for call i: the script's, or with --run-id-prefix one of its
 * own named run_id (*own set: the caller frees it). */
static const sbxc_request *request_for(struct bench *b, long i, const char *run_id,
                                       sbxc_request **own) {
  const sbxc_request *kind = b->requests[(size_t)i % b->n_requests_kinds];
  *own = NULL;
  if (run_id[0] == '\0')
    return kind;
  *own = build_request(b, (size_t)i % b->n_requests_kinds, run_id);
  return *own;
}

/* One JSON line for call i (b->lock held); chunks: output chunks a
 * streamed call saw (0 otherwise). */
static void record_call(struct bench *b, long i, const char *run_id, const struct sbxc_result *r,
                        double t0, double ms, long chunks) {
  char *line = sbxc_json_dump(
      json_pack("{s:I, s:o, s:s, s:o, s:I, s:f, s:f, s:o, s:s, s:i, s:i, s:I}", "i", (json_int_t)i,
                "run_id", sbxc_json_cstring(r->status == SBXC_OK ? r->run_id : run_id), "status",
                sbxc_status_name(r->status), "endpoint", sbxc_json_cstring(sbxc_result_endpoint(r)),
                "attempts", (json_int_t)r->attempts, "start_ms", t0 * 1000.0, "latency_ms", ms,
                "error", sbxc_json_cstring(r->status == SBXC_OK ? "" : r->message), "killed_by",
                r->status == SBXC_OK ? sbxc_killed_by_name(r->killed_by) : "", "exit_code",
                r->status == SBXC_OK ? r->exit_code : 0, "script",
                (int)(i % (long)b->n_requests_kinds), "chunks", (json_int_t)chunks));
  if (line == NULL || fprintf(b->record, "%s\n", line) < 0 || fflush(b->record) != 0)
    fprintf(stderr, "sandbox-bench: --record: call %ld not written\n", i);
  free(line);
}

static void count_call(struct bench *b, long i, const char *run_id, const struct sbxc_result *r,
                       double t0, double ms, long chunks) {
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
  b->by_status[r->status >= 0 && r->status < MAX_STATUS ? r->status : 2]++;
  if (r->status == SBXC_OK && r->killed_by >= 0 && r->killed_by < MAX_KILLED)
    b->by_killed[r->killed_by]++;
  if (b->record != NULL)
    record_call(b, i, run_id, r, t0, ms, chunks);
  pthread_mutex_unlock(&b->lock);
}

static void count_chunk(void *user, int stream, const uint8_t *data, size_t len) {
  (void)stream, (void)data, (void)len;
  (*(long *)user)++;
}

/* One streamed call: StartRun, then its watches to the end; r as
 * sbxc_run_code fills it. */
static void stream_call(struct bench *b, const sbxc_request *req, struct sbxc_result *r,
                        long *chunks) {
  sbxc_run *run;
  if (sbxc_start_run(b->client, req, &run, r) < 0)
    return;
  sbxc_result_free(r);
  sbxc_follow_run(b->client, run, 10000, count_chunk, chunks, r);
  sbxc_run_free(run);
}

static void *bench_thread(void *arg) {
  struct bench *b = arg;
  for (;;) {
    long i = atomic_fetch_add(&b->next, 1);
    if (b->total >= 0 && i >= b->total)
      break;
    if (b->total < 0 && now_s() - b->start >= b->duration_s)
      break;
    char run_id[128] = "";
    if (b->run_id_prefix != NULL)
      snprintf(run_id, sizeof(run_id), "%s-%ld", b->run_id_prefix, i);
    sbxc_request *own;
    const sbxc_request *req = request_for(b, i, run_id, &own);
    if (req == NULL) {
      fprintf(stderr, "sandbox-bench: out of memory\n");
      break;
    }
    double t0 = now_s();
    struct sbxc_result r;
    long chunks = 0;
    if (b->stream)
      stream_call(b, req, &r, &chunks);
    else
      sbxc_run_code(b->client, req, &r);
    count_call(b, i, run_id, &r, t0, (now_s() - t0) * 1000.0, chunks);
    sbxc_result_free(&r);
    sbxc_request_free(own);
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
  struct cli_endpoints ep; /* -e, $SANDBOX_URL, the TLS flags */
  long concurrency, requests, timeout_ms, connect_timeout_ms, resolve_interval_ms, retries;
  double duration;
  bool json, stream;
  const char *run_id_prefix, *record, *runtime;
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

static void usage(void) {
  printf("usage: sandbox-bench [-e URL]... [--concurrency N] [--requests N | --duration S]\n"
         "                     [--timeout-ms N] [--connect-timeout-ms N] [--run-id-prefix P]\n"
         "                     [--record FILE] [--resolve-interval-ms N] [--retries N]\n"
         "                     [--tls-ca FILE [--tls-cert FILE --tls-key FILE]\n"
         "                      [--tls-server-name NAME]] [--api-key KEY] [--json]\n"
         "                     [--stream] [--runtime NAME] SCRIPT...\n\n"
         "Several -e (or a comma-separated $SANDBOX_URL) form a fleet; the clock starts once\n"
         "every endpoint is connected or --connect-timeout-ms (default 5000) has passed.\n"
         "--run-id-prefix P names call i's run P-i; --record FILE writes one JSON line per\n"
         "call: i, run_id, status, endpoint, attempts, start_ms (CLOCK_MONOTONIC), latency_ms,\n"
         "error, killed_by, exit_code, script (the SCRIPT's index), chunks.\n"
         "--stream: each call is StartRun and WatchRun to its end (chunks: the output chunks\n"
         "it saw), the latency the whole of it.\n"
         "--retries: of RESOURCE_EXHAUSTED/UNAVAILABLE answers (default 0: they are counted).\n"
         "tls+tcp:// endpoints: --tls-ca (needed), --tls-cert/--tls-key, --tls-server-name,\n"
         "as sandbox-run has them.\n"
         "--api-key KEY (else $SANDBOX_API_KEY, which ps does not show): the API key of a\n"
         "server with --tenants; every call carries it (UNAUTHENTICATED is counted, never\n"
         "retried).\n");
}

enum {
  OPT_CONNECT = 256,
  OPT_PREFIX,
  OPT_RECORD,
  OPT_RESOLVE,
  OPT_RETRIES,
  OPT_STREAM,
  OPT_RUNTIME,
};

/* One option; -1 for a bad value, 1 for an unknown option. */
static int take_option(struct options *o, int c, const char *v) {
  char *end;
  switch (c) {
  case 'c':
    return parse_long("concurrency", v, &o->concurrency);
  case 'n':
    return parse_long("requests", v, &o->requests);
  case 'd':
    o->duration = strtod(v, &end);
    if (end != v && *end == '\0')
      return 0;
    fprintf(stderr, "sandbox-bench: --duration: \"%s\" is not a number\n", v);
    return -1;
  case 't':
    return parse_long("timeout-ms", v, &o->timeout_ms);
  case OPT_CONNECT:
    return parse_long("connect-timeout-ms", v, &o->connect_timeout_ms);
  case OPT_RESOLVE:
    return parse_long("resolve-interval-ms", v, &o->resolve_interval_ms);
  case OPT_RETRIES:
    return parse_long("retries", v, &o->retries);
  case OPT_PREFIX:
    o->run_id_prefix = v;
    return 0;
  case OPT_RECORD:
    o->record = v;
    return 0;
  case 'j':
    o->json = true;
    return 0;
  case OPT_STREAM:
    o->stream = true;
    return 0;
  case OPT_RUNTIME:
    o->runtime = v;
    return 0;
  }
  return cli_endpoints_option(&o->ep, "sandbox-bench", c, v);
}

/* 0 to go on, else the exit code: 0 after --help, 2 for bad arguments. */
static int parse_options(int argc, char **argv, struct options *o) {
  static const struct option opts[] = {
      {"endpoint", required_argument, NULL, 'e'},
      {"concurrency", required_argument, NULL, 'c'},
      {"requests", required_argument, NULL, 'n'},
      {"duration", required_argument, NULL, 'd'},
      {"timeout-ms", required_argument, NULL, 't'},
      {"connect-timeout-ms", required_argument, NULL, OPT_CONNECT},
      {"resolve-interval-ms", required_argument, NULL, OPT_RESOLVE},
      {"run-id-prefix", required_argument, NULL, OPT_PREFIX},
      {"record", required_argument, NULL, OPT_RECORD},
      {"retries", required_argument, NULL, OPT_RETRIES},
      {"stream", no_argument, NULL, OPT_STREAM},
      {"runtime", required_argument, NULL, OPT_RUNTIME},
      CLI_ENDPOINT_LONG_OPTIONS,
      {"json", no_argument, NULL, 'j'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0},
  };
  *o = (struct options){.concurrency = 1,
                        .requests = -1,
                        .connect_timeout_ms = SBXC_CONNECT_TIMEOUT_DEFAULT_MS,
                        .resolve_interval_ms = -1};
  int c, bad = 0;
  while ((c = getopt_long(argc, argv, "e:c:n:d:t:jh", opts, NULL)) != -1) {
    if (c == 'h') {
      usage();
      return -1;
    }
    int rv = take_option(o, c, optarg);
    if (rv > 0)
      return 2;
    bad |= rv;
  }
  if (bad != 0)
    return 2;
  if (optind >= argc || o->concurrency < 1 || o->concurrency > 4096 || o->timeout_ms < 0 ||
      o->connect_timeout_ms < 0 || o->retries < 0 || o->retries > 100 ||
      (o->requests < 0 && o->duration <= 0) || (o->requests >= 0 && o->duration > 0)) {
    fprintf(stderr, "sandbox-bench: need SCRIPT..., --concurrency 1..4096 and one of "
                    "--requests N or --duration S (see --help)\n");
    return 2;
  }
  if (cli_endpoints_finish(&o->ep, "sandbox-bench") < 0)
    return 2;
  return 0;
}

/* One request per script, each with the timeout. */
static int load_requests(struct bench *b, char **paths, size_t n, long timeout_ms) {
  b->n_requests_kinds = n;
  b->timeout_ms = timeout_ms;
  b->requests = calloc(n, sizeof(*b->requests));
  b->codes = calloc(n, sizeof(*b->codes));
  b->code_lens = calloc(n, sizeof(*b->code_lens));
  if (b->requests == NULL || b->codes == NULL || b->code_lens == NULL)
    return -1;
  for (size_t i = 0; i < n; i++) {
    if (load_script(paths[i], &b->codes[i], &b->code_lens[i]) < 0) {
      fprintf(stderr, "sandbox-bench: %s: %s\n", paths[i], strerror(errno));
      return -1;
    }
    if ((b->requests[i] = build_request(b, i, NULL)) == NULL) {
      fprintf(stderr, "sandbox-bench: out of memory\n");
      return -1;
    }
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
  if (b->record != NULL && fclose(b->record) != 0)
    fprintf(stderr, "sandbox-bench: --record: %s\n", strerror(errno));
  for (size_t i = 0; i < b->n_requests_kinds; i++) {
    if (b->requests != NULL)
      sbxc_request_free(b->requests[i]);
    if (b->codes != NULL)
      free(b->codes[i]);
  }
  free(b->requests);
  free(b->codes);
  free(b->code_lens);
  free(b->latencies_ms);
}

/* The client of the fleet, connected (or given up on) before the clock. */
static int open_client(struct bench *b, const struct options *o) {
  char err[512];
  if (cli_endpoints_open(&o->ep, &b->client, err, sizeof(err)) < 0) {
    fprintf(stderr, "sandbox-bench: %s\n", err);
    return -1;
  }
  sbxc_client_set_retries(b->client, (unsigned)o->retries);
  sbxc_client_set_connect_timeout_ms(b->client, (uint64_t)o->connect_timeout_ms);
  if (o->resolve_interval_ms >= 0)
    sbxc_client_set_resolve_interval_ms(b->client, (uint64_t)o->resolve_interval_ms);
  if (sbxc_client_wait_connected(b->client, 0, (uint64_t)o->connect_timeout_ms) < 0)
    fprintf(stderr, "sandbox-bench: not every endpoint connected within %ld ms; starting\n",
            o->connect_timeout_ms);
  return 0;
}

int main(int argc, char **argv) {
  struct options o;
  int rv = parse_options(argc, argv, &o);
  if (rv != 0) {
    cli_endpoints_free(&o.ep);
    return rv < 0 ? 0 : rv;
  }
  static struct bench b;
  b.total = o.requests;
  b.duration_s = o.duration;
  b.run_id_prefix = o.run_id_prefix;
  b.stream = o.stream;
  b.runtime = o.runtime;
  if (pthread_mutex_init(&b.lock, NULL) != 0) {
    cli_endpoints_free(&o.ep);
    return 1;
  }
  if (o.record != NULL && (b.record = fopen(o.record, "we")) == NULL) {
    fprintf(stderr, "sandbox-bench: --record %s: %s\n", o.record, strerror(errno));
    cli_endpoints_free(&o.ep);
    return 2;
  }
  if (load_requests(&b, argv + optind, (size_t)(argc - optind), o.timeout_ms) < 0) {
    free_bench(&b);
    cli_endpoints_free(&o.ep);
    return 2;
  }
  if (open_client(&b, &o) < 0) {
    free_bench(&b);
    cli_endpoints_free(&o.ep);
    return 1;
  }
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
  cli_endpoints_free(&o.ep);
  return ok ? 0 : 1;
}
