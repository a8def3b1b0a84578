/* sandbox-mcp: sandboxd as an MCP server over stdio, for agents that launch
 * their tools as processes. Reads newline-delimited JSON-RPC messages on
 * stdin, writes each response as one line on stdout (and nothing else:
 * logs go to stderr), and runs the tools through the C client against the
 * sandboxd endpoints given (--endpoint or -e, repeatable: a fleet). The protocol is
 * client/mcp/ (mcp.h); this file is the transport: framing, the size cap
 * of a message, and a fixed set of threads started here (--concurrency) so
 * that an agent's parallel tool calls run side by side; notifications
 * (progress) are written from those threads under the same lock as
 * answers, and a notifications/cancelled is taken on the reading thread
 * (client/mcp/calls.c). Every call carries
 * the tenant's API key (--api-key, else $SANDBOX_API_KEY: cli_endpoints.h). A message over the
 * cap or one that is not JSON gets a JSON-RPC error, and serving goes on.
 * Exits 0 at the end of stdin (after answering what was read), 1 when
 * stdout is gone, 2 on a usage error. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_endpoints.h"
#include "mcp.h"
#include "sandbox_client.h"

#define QUEUE_MAX 64
#define MAX_THREADS 64

static void usage(FILE *out) {
  fprintf(out,
          "usage: sandbox-mcp [--endpoint URL]... [--concurrency N] [--max-message-bytes N]\n"
          "                   [--retries N] [--connect-timeout-ms N] [--max-image-bytes N]\n"
          "                   [--max-resource-bytes N] [--max-attached-bytes N]\n"
          "                   [--max-stream-text-bytes N] [-v] [--api-key KEY]\n"
          "                   [--tls-ca FILE [--tls-cert FILE --tls-key FILE]\n"
          "                    [--tls-server-name NAME]]\n\n"
          "Serves the Model Context Protocol (revision %s) on stdin/stdout, one JSON-RPC\n"
          "message per line, with the tools run_code, list_session_files, preview_file and\n"
          "close_session and the sessions' files as resources (sandbox://sessions/ID/PATH),\n"
          "run by sandboxd at URL (default tcp://127.0.0.1:7878, or\n"
          "$SANDBOX_URL, comma-separated). Several --endpoint form a fleet. A run_code call\n"
          "with a progressToken gets its output as notifications/progress; notifications/\n"
          "cancelled cancels its run. Logs go to stderr.\n"
          "  --endpoint URL, -e URL   a sandboxd endpoint (prefer --endpoint: the MCP\n"
          "                           Inspector takes -e for itself)\n"
          "  --concurrency N          tool calls served at once (default 4)\n"
          "  --max-message-bytes N    the largest message read (default 16 MiB)\n"
          "  --retries N              retries of calls sandboxd refused as busy (default 3)\n"
          "  --connect-timeout-ms N   how long a call waits for a connection (default 5000)\n"
          "  --max-image-bytes N      one image in a result (default 1 MiB)\n"
          "  --max-resource-bytes N   one other file embedded in a result (default 256 KiB)\n"
          "  --max-attached-bytes N   all files of one result (default 4 MiB)\n"
          "  --max-stream-text-bytes N  stdout, stderr each in a result (default 64 KiB)\n"
          "  -v                       one stderr line per message\n"
          "  --api-key KEY            the tenant's API key every call carries (a server with\n"
          "                           --tenants); default $SANDBOX_API_KEY. A client\n"
          "                           certificate (--tls-cert) proves a tenant too\n"
          "  --tls-ca FILE            tls+tcp://HOST:PORT endpoints: the PEM CA bundle the\n"
          "                           server's certificate must chain to (then every -e is\n"
          "                           tls+tcp://); --tls-cert/--tls-key: this client's PEM\n"
          "                           certificate and unencrypted key, for servers that ask\n"
          "                           for one; --tls-server-name: the name the server's\n"
          "                           certificate must carry (default: each URL's host)\n",
          MCP_LATEST_PROTOCOL_VERSION);
}

struct options {
  struct cli_endpoints ep; /* -e, $SANDBOX_URL, the TLS flags */
  struct mcp_settings caps;
  int64_t concurrency, max_message_bytes, retries, connect_timeout_ms;
  bool verbose;
};

/* One message read, for a thread to answer. */
struct job {
  char *text; /* NULL: a message over the cap, answered with an error */
  size_t len;
};

/* The program's whole state: the queue of jobs and stdout's lock. */
struct serve {
  mcp_server *mcp;
  bool verbose;
  pthread_mutex_t lock;
  pthread_cond_t changed;
  struct job queue[QUEUE_MAX];
  size_t head, count, queue_max;
  bool closed;      /* stdin ended: threads leave once the queue is empty */
  bool stdout_gone; /* a write failed: stop reading */
  size_t max_message_bytes;
};

static int parse_i64(const char *s, const char *flag, int64_t lo, int64_t hi, int64_t *out) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi) {
    fprintf(stderr, "sandbox-mcp: %s: \"%s\" is not an integer from %" PRId64 " to %" PRId64 "\n",
            flag, s, lo, hi);
    return -1;
  }
  *out = v;
  return 0;
}

static int parse_size(const char *s, const char *flag, size_t *out) {
  int64_t v;
  if (parse_i64(s, flag, 1, INT64_C(1) << 30, &v) < 0)
    return -1;
  *out = (size_t)v;
  return 0;
}

enum {
  OPT_CONCURRENCY = 256,
  OPT_MAX_MESSAGE,
  OPT_RETRIES,
  OPT_CONNECT_TIMEOUT,
  OPT_IMAGE,
  OPT_RESOURCE,
  OPT_ATTACHED,
  OPT_STREAM,
  OPT_HELP,
};

static const struct option long_options[] = {
    {"concurrency", required_argument, NULL, OPT_CONCURRENCY},
    {"max-message-bytes", required_argument, NULL, OPT_MAX_MESSAGE},
    {"retries", required_argument, NULL, OPT_RETRIES},
    {"connect-timeout-ms", required_argument, NULL, OPT_CONNECT_TIMEOUT},
    {"max-image-bytes", required_argument, NULL, OPT_IMAGE},
    {"max-resource-bytes", required_argument, NULL, OPT_RESOURCE},
    {"max-attached-bytes", required_argument, NULL, OPT_ATTACHED},
    {"max-stream-text-bytes", required_argument, NULL, OPT_STREAM},
    {"help", no_argument, NULL, OPT_HELP},
    CLI_ENDPOINT_LONG_OPTIONS,
    {NULL, 0, NULL, 0},
};

static int take_option(struct options *o, int opt, const char *v) {
  switch (opt) {
  case 'v':
    o->verbose = true;
    return 0;
  case OPT_CONCURRENCY:
    return parse_i64(v, "--concurrency", 1, MAX_THREADS, &o->concurrency);
  case OPT_MAX_MESSAGE:
    return parse_i64(v, "--max-message-bytes", 4096, INT64_C(1) << 30, &o->max_message_bytes);
  case OPT_RETRIES:
    return parse_i64(v, "--retries", 0, 100, &o->retries);
  case OPT_CONNECT_TIMEOUT:
    return parse_i64(v, "--connect-timeout-ms", 0, 86400000, &o->connect_timeout_ms);
  case OPT_IMAGE:
    return parse_size(v, "--max-image-bytes", &o->caps.max_image_bytes);
  case OPT_RESOURCE:
    return parse_size(v, "--max-resource-bytes", &o->caps.max_resource_bytes);
  case OPT_ATTACHED:
    return parse_size(v, "--max-attached-bytes", &o->caps.max_attached_bytes);
  case OPT_STREAM:
    return parse_size(v, "--max-stream-text-bytes", &o->caps.max_stream_text_bytes);
  }
  return cli_endpoints_option(&o->ep, "sandbox-mcp", opt, v) == 0 ? 0 : -1;
}

/* 0, 1 after --help, 2 on a usage error. */
static int parse_args(int argc, char **argv, struct options *o) {
  int opt;
  while ((opt = getopt_long(argc, argv, "e:vh", long_options, NULL)) != -1) {
    if (opt == 'h' || opt == OPT_HELP) {
      usage(stdout);
      return 1;
    }
    if (take_option(o, opt, optarg) < 0) {
      usage(stderr);
      return 2;
    }
  }
  if (optind != argc) {
    usage(stderr);
    return 2;
  }
  if (cli_endpoints_finish(&o->ep, "sandbox-mcp") < 0)
    return 2;
  return 0;
}

/* Writes one response line; false once stdout is gone. */
static bool write_line(struct serve *sv, const char *text) {
  size_t len = strlen(text);
  bool ok = true;
  pthread_mutex_lock(&sv->lock);
  for (size_t off = 0; ok && off <= len;) {
    const char *p = off < len ? text + off : "\n";
    ssize_t w = write(STDOUT_FILENO, p, off < len ? len - off : 1);
    if (w < 0 && errno == EINTR)
      continue;
    ok = w > 0;
    off += ok ? (size_t)w : 0;
  }
  if (!ok)
    sv->stdout_gone = true;
  pthread_mutex_unlock(&sv->lock);
  return ok;
}

/* A notification from the server (progress), from any thread. */
static void notify_line(void *arg, const char *line) {
  write_line(arg, line);
}

static void answer(struct serve *sv, struct job *job) {
  char *response = NULL;
  enum mcp_outcome outcome = MCP_REFUSED;
  char over[96];
  int rc = 0;
  if (job->text == NULL) {
    snprintf(over, sizeof(over),
             "Invalid Request: the message is over %zu bytes (--max-message-bytes)",
             sv->max_message_bytes);
    response = mcp_error_text(MCP_INVALID_REQUEST, over);
  } else {
    rc = mcp_handle_message(sv->mcp, job->text, job->len, &response, &outcome);
  }
  if (rc < 0 || (outcome != MCP_NO_ANSWER && response == NULL))
    response = mcp_error_text(MCP_INTERNAL_ERROR, "out of memory");
  if (sv->verbose)
    fprintf(stderr, "sandbox-mcp: a message of %zu bytes: %s\n", job->len,
            outcome == MCP_NO_ANSWER ? "no answer"
            : outcome == MCP_REFUSED ? "refused"
                                     : "answered");
  if (response != NULL)
    write_line(sv, response);
  free(response);
  free(job->text);
}

static void *serve_thread(void *arg) {
  struct serve *sv = arg;
  for (;;) {
    pthread_mutex_lock(&sv->lock);
    while (sv->count == 0 && !sv->closed)
      pthread_cond_wait(&sv->changed, &sv->lock);
    if (sv->count == 0) {
      pthread_mutex_unlock(&sv->lock);
      return NULL;
    }
    struct job job = sv->queue[sv->head];
    sv->head = (sv->head + 1) % QUEUE_MAX;
    sv->count--;
    pthread_cond_broadcast(&sv->changed);
    pthread_mutex_unlock(&sv->lock);
    answer(sv, &job);
  }
}

/* Queues a job, waiting while the queue is full (reading stops: the
 * client's writes block, which bounds what is held here); false (the job
 * dropped) once stdout is gone. */
static bool enqueue(struct serve *sv, struct job job) {
  pthread_mutex_lock(&sv->lock);
  while (sv->count == sv->queue_max && !sv->stdout_gone)
    pthread_cond_wait(&sv->changed, &sv->lock);
  bool ok = !sv->stdout_gone;
  if (ok) {
    sv->queue[(sv->head + sv->count) % QUEUE_MAX] = job;
    sv->count++;
    pthread_cond_broadcast(&sv->changed);
  }
  pthread_mutex_unlock(&sv->lock);
  if (!ok)
    free(job.text);
  return ok;
}

/* stdin split into lines, each at most max bytes; memory stays within
 * max + one read. */
struct reader {
  char *buf;
  size_t start, len, scan, cap, max;
  bool skipping; /* inside a line over the cap: dropped up to its newline */
};

enum { LINE, LINE_TOO_LONG, END, READ_ERROR };

/* The next line (NUL-terminated in r->buf) at *line, *len bytes. */
static int next_line(struct reader *r, char **line, size_t *len) {
  for (;;) {
    char *nl = memchr(r->buf + r->scan, '\n', r->len - r->scan);
    if (nl != NULL) {
      size_t end = (size_t)(nl - r->buf);
      *nl = '\0';
      *line = r->buf + r->start;
      *len = end - r->start;
      bool over = end - r->start > r->max;
      r->start = r->scan = end + 1;
      if (!r->skipping && !over)
        return LINE;
      r->skipping = false;
      return LINE_TOO_LONG;
    }
    r->scan = r->len;
    if (r->len - r->start > r->max) { /* over the cap: drop what is held */
      r->skipping = true;
      r->start = r->scan = r->len = 0;
    }
    if (r->start > 0) {
      memmove(r->buf, r->buf + r->start, r->len - r->start);
      r->len -= r->start;
      r->scan -= r->start;
      r->start = 0;
    }
    ssize_t n = read(STDIN_FILENO, r->buf + r->len, r->cap - r->len - 1);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return READ_ERROR;
    if (n == 0 && r->skipping) {
      r->skipping = false;
      return LINE_TOO_LONG;
    }
    if (n == 0 && r->len == 0)
      return END;
    if (n == 0) {
      r->buf[r->len++] = '\n'; /* a last line without a newline; room kept by the read */
      continue;
    }
    r->len += (size_t)n;
  }
}

/* A line's message: its trailing CR dropped; NULL text for a blank line. */
static struct job job_of(const char *line, size_t len, bool *blank) {
  if (len > 0 && line[len - 1] == '\r')
    len--;
  *blank = strspn(line, " \t") >= len;
  struct job job = {NULL, len};
  if (!*blank && (job.text = malloc(len + 1)) != NULL) {
    memcpy(job.text, line, len);
    job.text[len] = '\0';
  }
  return job;
}

/* Reads stdin to its end, handing each message to the threads. */
static int read_messages(struct serve *sv) {
  struct reader r = {.max = sv->max_message_bytes, .cap = sv->max_message_bytes + (64 << 10) + 1};
  if ((r.buf = malloc(r.cap)) == NULL)
    return -1;
  int rc = 0;
  for (;;) {
    char *line;
    size_t len;
    int kind = next_line(&r, &line, &len);
    if (kind == END || kind == READ_ERROR) {
      rc = kind == END ? 0 : -1;
      break;
    }
    /* A cancellation is taken here: the threads may all be busy with the
     * calls it cancels. */
    if (kind == LINE && mcp_take_cancel(sv->mcp, line, len))
      continue;
    bool blank = false;
    struct job job = kind == LINE ? job_of(line, len, &blank) : (struct job){NULL, 0};
    if (kind == LINE && !blank && job.text == NULL)
      job = (struct job){NULL, 0}; /* out of memory: answered like a message too large */
    if (!blank && !enqueue(sv, job))
      break;
  }
  free(r.buf);
  return rc;
}

static int serve(mcp_server *mcp, const struct options *o) {
  struct serve sv = {
      .mcp = mcp,
      .verbose = o->verbose,
      .queue_max = (size_t)o->concurrency * 2 > QUEUE_MAX ? QUEUE_MAX : (size_t)o->concurrency * 2,
      .max_message_bytes = (size_t)o->max_message_bytes};
  pthread_t threads[MAX_THREADS];
  size_t n = 0;
  pthread_mutex_init(&sv.lock, NULL);
  pthread_cond_init(&sv.changed, NULL);
  mcp_server_set_notify(mcp, notify_line, &sv);
  while (n < (size_t)o->concurrency && pthread_create(&threads[n], NULL, serve_thread, &sv) == 0)
    n++;
  int rc = n > 0 ? read_messages(&sv) : -1;
  if (rc < 0)
    fprintf(stderr, "sandbox-mcp: %s\n", n > 0 ? "reading stdin failed" : "no thread started");
  pthread_mutex_lock(&sv.lock);
  sv.closed = true;
  pthread_cond_broadcast(&sv.changed);
  pthread_mutex_unlock(&sv.lock);
  for (size_t i = 0; i < n; i++)
    pthread_join(threads[i], NULL);
  mcp_server_set_notify(mcp, NULL, NULL);
  pthread_mutex_destroy(&sv.lock);
  pthread_cond_destroy(&sv.changed);
  return rc < 0 || sv.stdout_gone ? 1 : 0;
}

static sbxc_client *open_client(const struct options *o) {
  char err[512];
  sbxc_client *client;
  if (cli_endpoints_open(&o->ep, &client, err, sizeof(err)) < 0) {
    fprintf(stderr, "sandbox-mcp: %s\n", err);
    return NULL;
  }
  sbxc_client_set_retries(client, (unsigned)o->retries);
  sbxc_client_set_connect_timeout_ms(client, (uint64_t)o->connect_timeout_ms);
  return client;
}

int main(int argc, char **argv) {
  struct options o = {.concurrency = 4,
                      .max_message_bytes = 16 << 20,
                      .retries = 3,
                      .connect_timeout_ms = SBXC_CONNECT_TIMEOUT_DEFAULT_MS};
  mcp_settings_default(&o.caps);
  int rc = parse_args(argc, argv, &o);
  if (rc != 0) {
    cli_endpoints_free(&o.ep);
    return rc == 1 ? 0 : 2;
  }
  signal(SIGPIPE, SIG_IGN); /* a closed stdout is a failed write, then exit 1 */
  char err[512];
  sbxc_client *client = open_client(&o);
  mcp_server *mcp = client != NULL ? mcp_server_new(client, &o.caps, err, sizeof(err)) : NULL;
  if (client != NULL && mcp == NULL)
    fprintf(stderr, "sandbox-mcp: %s\n", err);
  if (mcp != NULL) {
    fprintf(stderr, "sandbox-mcp: serving MCP %s on stdio; sandboxd at %s%s\n",
            MCP_LATEST_PROTOCOL_VERSION, o.ep.urls[0], o.ep.n > 1 ? " and more" : "");
    rc = serve(mcp, &o);
  } else {
    rc = 1;
  }
  mcp_server_free(mcp);
  sbxc_client_close(client);
  cli_endpoints_free(&o.ep);
  return rc;
}
