/* piston.c: the Piston API v2 (engineer-man/piston, docs/api-v2.md) onto
 * RunCode: GET /api/v2/runtimes and POST /api/v2/execute.
 *
 * A thin translation, both ways. In: the request's JSON checked field by
 * field (an unknown field or a wrong type is 400 naming it), the language
 * and version matched against the one runtime we have (python at the
 * interpreter's version), files, stdin, args and the run_* limits turned
 * into one RunCode request. Out: RunCode's answer in Piston's shape, its
 * killed_by as the status codes of isolate that Piston passes on (RE, SG,
 * TO, OL, EL, XX). Everything else (limits, their maxima, file names,
 * sizes, the queue) is RunCode's: this file checks no limit, so a value
 * RunCode refuses is refused with RunCode's own message. It must never run
 * anything but through the client. */
#include <errno.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "piston.h"
#include "caller.h"
#include "cleanup.h"
#include "http_json.h"
#include "runtimes.h"
#include "text.h"
#include "validate.h"

#define PISTON_MESSAGE_MAX 768

/* Why a request is not run: the HTTP status and Piston's {message}. */
struct piston_refusal {
  unsigned status;
  char message[PISTON_MESSAGE_MAX];
};

static int refuse(struct piston_refusal *r, unsigned status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int refuse(struct piston_refusal *r, unsigned status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r->message, sizeof(r->message), fmt, ap);
  va_end(ap);
  r->status = status;
  return -1;
}

static const char *const execute_fields[] = {"language",
                                             "version",
                                             "files",
                                             "stdin",
                                             "args",
                                             "run_timeout",
                                             "compile_timeout",
                                             "run_cpu_time",
                                             "compile_cpu_time",
                                             "run_memory_limit",
                                             "compile_memory_limit",
                                             NULL};
static const char *const file_fields[] = {"name", "content", "encoding", NULL};

/* ---- runtimes ---- */

/* Every available runtime but python-zygote (a mode of python, chosen by
 * name only) in Piston's shape; "runtime" names it where its name is not
 * its language (node for javascript), as Piston's own list does. */
static json_t *runtime_list(const struct fronts *f) {
  json_t *list = json_array();
  for (size_t i = 0; list != NULL && i < f->runtimes->n; i++) {
    const struct runtime *rt = &f->runtimes->v[i];
    if (!rt->available || rt->kind == RUNTIME_KIND_PYTHON_ZYGOTE)
      continue;
    json_t *aliases = json_array();
    for (size_t a = 0; aliases != NULL && a < rt->n_aliases; a++)
      json_array_append_new(aliases, json_string(rt->aliases[a]));
    json_t *one = json_pack("{s:s,s:s,s:o}", "language", rt->language, "version", rt->version,
                            "aliases", aliases);
    if (one != NULL && strcmp(rt->name, rt->language) != 0)
      json_object_set_new(one, "runtime", json_string(rt->name));
    json_array_append_new(list, one);
  }
  return list;
}

/* A request not let in (caller.h): 401, Piston's {"message"}, and the
 * challenge. */
static void answer_unauthenticated(struct http_response *resp, const struct front_refusal *r) {
  http_response_json_message(resp, r->status, "%s", r->message);
  if (front_refusal_header(resp, r) < 0)
    http_response_json_message(resp, 500, "the WWW-Authenticate header did not fit");
}

static void handle_runtimes(void *ctx, const struct http_request *req, struct http_response *resp) {
  struct fronts *f = ctx;
  struct front_caller fc;
  struct front_refusal r;
  if (front_caller_establish(f, req, &fc, &r) < 0) {
    answer_unauthenticated(resp, &r);
    return;
  }
  http_response_json(resp, 200, runtime_list(f));
}

/* ---- execute: the request ---- */

/* A limit: absent, null, 0 and -1 are the server's default (0 in RunCode);
 * a number is taken in Piston's unit, its fraction dropped. */
static int limit_field(const json_t *body, const char *name, int64_t *out,
                       struct piston_refusal *r) {
  const json_t *v = json_object_get(body, name);
  *out = 0;
  if (v == NULL || json_is_null(v))
    return 0;
  if (!json_is_number(v))
    return refuse(r, 400, "If specified, %s must be a number (it is %s)", name,
                  http_json_type_name(v));
  double d = json_number_value(v);
  if (d < -1 || (d < 0 && d > -1))
    return refuse(r, 400, "%s must be non-negative, or -1 for the server's default", name);
  if (d > 9.2e18)
    return refuse(r, 400, "%s is too large", name);
  *out = d < 0 ? 0 : (int64_t)d;
  return 0;
}

/* The string field name of obj, or def when absent or null; NULL (with r)
 * when it is something else. */
static const char *string_field(const json_t *obj, const char *name, const char *where,
                                const char *def, struct piston_refusal *r) {
  const json_t *v = json_object_get(obj, name);
  if (v == NULL || json_is_null(v))
    return def;
  if (!json_is_string(v)) {
    refuse(r, 400, "%s%s must be a string (it is %s)", where, name, http_json_type_name(v));
    return NULL;
  }
  return json_string_value(v);
}

/* s (n bytes) decoded from encoding into buf (room for n + 3 bytes): utf8
 * as it is, hex and base64 (whole quads, '=' padding only at the end)
 * decoded; false when it does not decode. */
static bool decode_content(const char *s, size_t n, const char *encoding, uint8_t *buf,
                           size_t *len) {
  if (strcmp(encoding, "utf8") == 0) {
    memcpy(buf, s, n);
    *len = n;
    return true;
  }
  if (strcmp(encoding, "hex") == 0) {
    if (n % 2 != 0)
      return false;
    for (size_t k = 0; k < n; k += 2) {
      int hi = text_hex_digit(s[k]), lo = text_hex_digit(s[k + 1]);
      if (hi < 0 || lo < 0)
        return false;
      buf[k / 2] = (uint8_t)(hi << 4 | lo);
    }
    *len = n / 2;
    return true;
  }
  if (n % 4 != 0 || n > INT32_MAX)
    return false;
  int got = EVP_DecodeBlock(buf, (const unsigned char *)s, (int)n);
  if (got < 0)
    return false;
  size_t pad = n >= 2 && s[n - 1] == '=' ? (s[n - 2] == '=' ? 2 : 1) : 0;
  *len = (size_t)got - pad;
  return true;
}

/* A file's content as bytes (malloc'd in *out). -1 with r when it does not
 * decode. */
static int file_content(const json_t *content, const char *encoding, size_t i, uint8_t **out,
                        size_t *len, struct piston_refusal *r) {
  const char *s = json_string_value(content);
  size_t n = json_string_length(content);
  cleanup_free uint8_t *buf = malloc(n + 3);
  if (buf == NULL)
    return refuse(r, 500, "out of memory");
  if (!decode_content(s, n, encoding, buf, len))
    return refuse(r, 400, "files[%zu].content is not valid %s", i, encoding);
  *out = steal_pointer(&buf);
  return 0;
}

/* The launcher of a program with files beside it: every file is in
 * /workspace/mounts/, the program is run from there as __main__ with its
 * directory first on sys.path, as "python3 NAME ARGS" in a Piston job's
 * directory would. The name goes in as hex: no quoting to get wrong. */
static char *launcher(const char *name) {
  size_t n = strlen(name);
  char *hex = malloc(2 * n + 1);
  if (hex == NULL)
    return NULL;
  for (size_t i = 0; i < n; i++)
    snprintf(hex + 2 * i, 3, "%02x", (unsigned char)name[i]);
  char *code = NULL;
  int rc = asprintf(&code,
                    "import os, runpy, sys\n"
                    "os.chdir('/workspace/mounts')\n"
                    "sys.argv[0] = bytes.fromhex('%s').decode()\n"
                    "sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))\n"
                    "runpy.run_path(sys.argv[0], run_name='__main__')\n",
                    hex);
  free(hex);
  return rc < 0 ? NULL : code;
}

/* One entry of files[], checked and decoded. */
struct piston_file {
  char name[512]; /* as given, or Piston's default "fileI.code" */
  bool utf8;
  uint8_t *data; /* malloc'd */
  size_t len;
};

static int file_entry(const json_t *file, size_t i, struct piston_file *pf,
                      struct piston_refusal *r) {
  char where[32];
  snprintf(where, sizeof(where), "files[%zu].", i);
  if (!json_is_object(file))
    return refuse(r, 400, "files[%zu] must be an object (it is %s)", i, http_json_type_name(file));
  const char *unknown = http_json_unknown_key(file, file_fields);
  if (unknown != NULL)
    return refuse(r, 400, "files[%zu]: unknown field \"%s\" (known: name, content, encoding)", i,
                  unknown);
  const json_t *content = json_object_get(file, "content");
  if (!json_is_string(content))
    return refuse(r, 400, "files[%zu].content is required as a string", i);
  const char *encoding = string_field(file, "encoding", where, "utf8", r);
  if (encoding == NULL)
    return -1;
  if (strcmp(encoding, "utf8") != 0 && strcmp(encoding, "base64") != 0 &&
      strcmp(encoding, "hex") != 0)
    return refuse(r, 400, "files[%zu].encoding must be one of utf8, base64, hex", i);
  pf->utf8 = strcmp(encoding, "utf8") == 0;
  const json_t *name_v = json_object_get(file, "name");
  const char *name = string_field(file, "name", where, "", r);
  if (name == NULL)
    return -1;
  if (json_is_string(name_v) && strlen(name) != json_string_length(name_v))
    return refuse(r, 400, "files[%zu].name must not hold a NUL character", i);
  if (strlen(name) >= sizeof(pf->name))
    return refuse(r, 400, "files[%zu].name is longer than %zu bytes", i, sizeof(pf->name) - 1);
  if (name[0] != '\0')
    snprintf(pf->name, sizeof(pf->name), "%s", name);
  else /* Piston: no name, or an empty one, is fileI.code */
    snprintf(pf->name, sizeof(pf->name), "file%zu.code", i);
  return file_content(content, encoding, i, &pf->data, &pf->len, r);
}

/* files[]: the first is the program. One file of text (what RunCode's
 * code, a string, can carry: UTF-8 without NUL) is the run's main.py, as
 * from any client, its name checked as RunCode checks a file path. Any
 * other set goes into the request as files at mounts/NAME (RunCode checks
 * their names and sizes) and main.py is a launcher that runs the first of
 * them from there, so the others are beside it. For a manifest runtime
 * the first file is always the program (its file, main.sh, main.c, ...)
 * and must be text; the others are at mounts/NAME (docs/PISTON.md). */
static int add_files(sbxc_request *rq, const json_t *files, const struct runtime *rt,
                     struct piston_refusal *r) {
  size_t n = json_array_size(files), n_utf8 = 0;
  char program[sizeof(((struct piston_file *)0)->name)] = "";
  bool plain = false, python = runtime_is_python(rt);
  for (size_t i = 0; i < n; i++) {
    struct piston_file pf = {0};
    if (file_entry(json_array_get(files, i), i, &pf, r) < 0)
      return -1;
    n_utf8 += pf.utf8;
    int rc = 0;
    bool text = pf.len == 0 || (text_utf8_valid((const char *)pf.data, pf.len) &&
                                memchr(pf.data, 0, pf.len) == NULL);
    if (i == 0) {
      snprintf(program, sizeof(program), "%s", pf.name);
      plain = (n == 1 || !python) && text;
    }
    if (i == 0 && !python && !text)
      rc = refuse(r, 400, "files[0]: the program of runtime %s must be UTF-8 text without NUL",
                  rt->name);
    else if (i == 0 && plain && !validate_relative_path(pf.name))
      rc = refuse(r, 400, "files[0].name: %s", VALIDATE_RELATIVE_PATH_RULE);
    else if (i == 0 && plain)
      rc = sbxc_request_set_code(rq, (const char *)pf.data, pf.len) < 0
               ? refuse(r, 500, "out of memory")
               : 0;
    else if (sbxc_request_add_file(rq, pf.name, pf.data, pf.len) < 0)
      rc = refuse(r, 500, "out of memory");
    free(pf.data);
    if (rc < 0)
      return -1;
  }
  if (n_utf8 == 0)
    return refuse(r, 400, "files must include at least one utf8 encoded file");
  if (!plain) {
    char *code = launcher(program);
    int rc = code != NULL ? sbxc_request_set_code(rq, code, strlen(code)) : -1;
    free(code);
    if (rc < 0)
      return refuse(r, 500, "out of memory");
  }
  return 0;
}

/* stdin (Piston adds a final newline when there is none) and args. */
static int add_stdin_args(sbxc_request *rq, const json_t *body, struct piston_refusal *r) {
  const json_t *in = json_object_get(body, "stdin");
  if (in != NULL && !json_is_null(in)) {
    if (!json_is_string(in))
      return refuse(r, 400, "stdin must be a string (it is %s)", http_json_type_name(in));
    size_t n = json_string_length(in);
    char *data = malloc(n + 1);
    if (data == NULL)
      return refuse(r, 500, "out of memory");
    memcpy(data, json_string_value(in), n);
    if (n == 0 || data[n - 1] != '\n')
      data[n++] = '\n';
    int rc = sbxc_request_set_stdin(rq, data, n);
    free(data);
    if (rc < 0)
      return refuse(r, 500, "out of memory");
  } else if (sbxc_request_set_stdin(rq, "\n", 1) < 0) {
    return refuse(r, 500, "out of memory");
  }
  const json_t *args = json_object_get(body, "args");
  if (args == NULL || json_is_null(args))
    return 0;
  if (!json_is_array(args))
    return refuse(r, 400, "args must be an array of strings (it is %s)", http_json_type_name(args));
  size_t i;
  const json_t *a;
  json_array_foreach(args, i, a) {
    if (!json_is_string(a))
      return refuse(r, 400, "args[%zu] must be a string (it is %s)", i, http_json_type_name(a));
    if (strlen(json_string_value(a)) != json_string_length(a))
      return refuse(r, 400, "args[%zu] must not hold a NUL character", i);
    if (sbxc_request_add_arg(rq, json_string_value(a)) < 0)
      return refuse(r, 500, "out of memory");
  }
  return 0;
}

/* run_timeout, run_cpu_time (ms) and run_memory_limit (bytes) become the
 * run's limits; compile_* the compile stage's (RunCodeRequest's
 * compile_limits) for a compiled runtime, and are checked the same way and
 * unused for the others, which have no compile stage (as in Piston). */
static int add_limits(sbxc_request *rq, const json_t *body, const struct runtime *rt,
                      struct piston_refusal *r) {
  struct sbxc_limits lim = {0}, compile = {0};
  if (limit_field(body, "run_timeout", &lim.timeout_ms, r) < 0 ||
      limit_field(body, "run_cpu_time", &lim.cpu_time_ms, r) < 0 ||
      limit_field(body, "run_memory_limit", &lim.memory_bytes, r) < 0 ||
      limit_field(body, "compile_timeout", &compile.timeout_ms, r) < 0 ||
      limit_field(body, "compile_cpu_time", &compile.cpu_time_ms, r) < 0 ||
      limit_field(body, "compile_memory_limit", &compile.memory_bytes, r) < 0)
    return -1;
  sbxc_request_set_limits(rq, &lim);
  if (rt->kind == RUNTIME_KIND_MANIFEST && rt->manifest.has_compile)
    sbxc_request_set_compile_limits(rq, &compile);
  return 0;
}

/* The whole request into rq; -1 with r when it is refused. */
/* The server's default network for Piston runs (--piston-allow-net,
 * checked within --egress-allow at start): Piston's API has no field. */
static int add_allow_net(const struct fronts *f, sbxc_request *rq, struct piston_refusal *r) {
  const char *p = f->piston_allow_net != NULL ? f->piston_allow_net : "";
  while (*p != '\0') {
    size_t n = strcspn(p, ",");
    char entry[320];
    snprintf(entry, sizeof entry, "%.*s", (int)(n < sizeof entry ? n : sizeof entry - 1), p);
    if (sbxc_request_add_allow_net(rq, entry) < 0)
      return refuse(r, 500, "out of memory");
    p += n + (p[n] == ',');
  }
  return 0;
}

/* language and version through the server's one resolver (runtimes.h):
 * the runtime it picks, named exactly in the request. */
static int pick_runtime(const struct fronts *f, const char *language, const char *version,
                        sbxc_request *rq, const struct runtime **rt, struct piston_refusal *r) {
  struct sbx_error err;
  if (runtimes_resolve(f->runtimes, "", language, version, rt, &err) < 0) {
    if (err.code != SBX_INVALID_ARGUMENT)
      return refuse(r, 400, "%s", err.msg); /* listed, but unavailable: why */
    char lang[72], range[72];               /* as Piston says it */
    text_printable(language, strlen(language), lang, sizeof lang, false);
    text_printable(version, strlen(version), range, sizeof range, false);
    return refuse(r, 400, "%s-%s runtime is unknown", lang, range);
  }
  if (sbxc_request_set_runtime(rq, (*rt)->name) < 0)
    return refuse(r, 500, "out of memory");
  return 0;
}

static int execute_request(const struct fronts *f, const struct http_request *req, sbxc_request *rq,
                           const struct runtime **rt, struct piston_refusal *r) {
  char why[PISTON_MESSAGE_MAX - 64];
  json_t *body = http_json_body_object(req, why, sizeof(why));
  if (body == NULL)
    return refuse(r, 400, "%s", why);
  int rc = -1;
  const char *unknown = http_json_unknown_key(body, execute_fields);
  const json_t *language = json_object_get(body, "language");
  const json_t *version = json_object_get(body, "version");
  const json_t *files = json_object_get(body, "files");
  char known[400];
  if (unknown != NULL) {
    http_json_names(execute_fields, known, sizeof(known));
    refuse(r, 400, "unknown field \"%s\" (known: %s)", unknown, known);
  } else if (!json_is_string(language) || json_string_length(language) == 0) {
    refuse(r, 400, "language is required as a string");
  } else if (!json_is_string(version) || json_string_length(version) == 0) {
    refuse(r, 400, "version is required as a string");
  } else if (!json_is_array(files)) {
    refuse(r, 400, "files is required as an array");
  } else if (pick_runtime(f, json_string_value(language), json_string_value(version), rq, rt, r) ==
                 0 &&
             add_files(rq, files, *rt, r) == 0 && add_stdin_args(rq, body, r) == 0 &&
             add_limits(rq, body, *rt, r) == 0 && add_allow_net(f, rq, r) == 0) {
    rc = 0;
  }
  json_decref(body);
  return rc;
}

/* ---- execute: the answer ---- */

/* "SIGSEGV", or NULL for no signal. */
static json_t *signal_name(int sig) {
  const char *abbrev = sig > 0 ? sigabbrev_np(sig) : NULL;
  if (abbrev == NULL)
    return sig > 0 ? json_sprintf("SIG%d", sig) : json_null();
  return json_sprintf("SIG%s", abbrev);
}

/* One stage, run or compile, as Piston answers each: RunCode's result, or
 * its compile stage, in one shape. */
struct stage {
  const uint8_t *stdout_data, *stderr_data;
  size_t stdout_len, stderr_len;
  bool stdout_truncated, stderr_truncated;
  int killed_by, exit_code, signal;
  uint64_t cpu_time_ms, wall_time_ms, peak_memory_bytes;
};

static struct stage run_stage(const struct sbxc_result *r) {
  return (struct stage){r->stdout_data, r->stderr_data,      r->stdout_len,
                        r->stderr_len,  r->stdout_truncated, r->stderr_truncated,
                        r->killed_by,   r->exit_code,        r->signal,
                        r->cpu_time_ms, r->wall_time_ms,     r->peak_memory_bytes};
}

static struct stage compile_stage(const struct sbxc_compile *c) {
  return (struct stage){c->stdout_data, c->stderr_data,      c->stdout_len,
                        c->stderr_len,  c->stdout_truncated, c->stderr_truncated,
                        c->killed_by,   c->exit_code,        c->signal,
                        c->cpu_time_ms, c->wall_time_ms,     c->peak_memory_bytes};
}

/* The stage's output as Piston's stdout, stderr and output (invalid UTF-8
 * replaced by U+FFFD). Piston's output interleaves the streams as they
 * came; RunCode keeps them apart, so output is stdout followed by stderr. */
static int add_output(json_t *run, const struct stage *res) {
  size_t n_out = 0, n_err = 0;
  char *out = text_utf8_repair(res->stdout_data, res->stdout_len, &n_out);
  char *err = text_utf8_repair(res->stderr_data, res->stderr_len, &n_err);
  char *both = out != NULL && err != NULL ? malloc(n_out + n_err + 1) : NULL;
  int rc = -1;
  if (both != NULL) {
    memcpy(both, out, n_out);
    memcpy(both + n_out, err, n_err);
    rc = json_object_set_new(run, "stdout", json_stringn(out, n_out)) == 0 &&
                 json_object_set_new(run, "stderr", json_stringn(err, n_err)) == 0 &&
                 json_object_set_new(run, "output", json_stringn(both, n_out + n_err)) == 0
             ? 0
             : -1;
  }
  free(out);
  free(err);
  free(both);
  return rc;
}

/* How the run ended in isolate's words, as Piston passes them on: status
 * (null for a clean exit), message, exit code (null once a signal ended
 * it) and signal. A memory kill is the OOM killer's SIGKILL: isolate (and
 * so Piston) says SG with SIGKILL for it; only the message says why. */
struct piston_outcome {
  const char *status;
  char message[128];
  json_t *code, *signal;
};

static void outcome(const struct stage *res, struct piston_outcome *o) {
  *o = (struct piston_outcome){NULL, "", NULL, NULL};
  switch (res->killed_by) {
  case SBXC_KILLED_BY_TIMEOUT:
    o->status = "TO";
    snprintf(o->message, sizeof(o->message), "Time limit exceeded");
    o->signal = signal_name(SIGKILL);
    break;
  case SBXC_KILLED_BY_MEMORY:
    o->status = "SG";
    snprintf(o->message, sizeof(o->message),
             "Caught fatal signal %d (out of memory: the run reached its memory limit)", SIGKILL);
    o->signal = signal_name(SIGKILL);
    break;
  case SBXC_KILLED_BY_OUTPUT_LIMIT: {
    bool err_only = res->stderr_truncated && !res->stdout_truncated;
    o->status = err_only ? "EL" : "OL";
    snprintf(o->message, sizeof(o->message), "%s length exceeded", err_only ? "stderr" : "stdout");
    o->signal = signal_name(SIGKILL);
    break;
  }
  default:
    if (res->signal > 0) {
      o->status = "SG";
      snprintf(o->message, sizeof(o->message), "Caught fatal signal %d", res->signal);
      o->signal = signal_name(res->signal);
    } else if (res->exit_code != 0) {
      o->status = "RE";
      snprintf(o->message, sizeof(o->message), "Exited with error status %d", res->exit_code);
    }
  }
  o->code = o->signal != NULL ? json_null() : json_integer(res->exit_code);
  if (o->signal == NULL)
    o->signal = json_null();
}

static json_t *stage_object(const struct stage *res) {
  json_t *run = json_object();
  if (run == NULL || add_output(run, res) < 0) {
    json_decref(run);
    return NULL;
  }
  struct piston_outcome o;
  outcome(res, &o);
  json_t *rest =
      json_pack("{s:o,s:o,s:s?,s:s?,s:I,s:I,s:I}", "code", o.code, "signal", o.signal, "message",
                o.status != NULL ? o.message : NULL, "status", o.status, "cpu_time",
                (json_int_t)res->cpu_time_ms, "wall_time", (json_int_t)res->wall_time_ms, "memory",
                (json_int_t)res->peak_memory_bytes);
  if (rest == NULL || json_object_update(run, rest) < 0) {
    json_decref(rest);
    json_decref(run);
    return NULL;
  }
  json_decref(rest);
  return run;
}

/* Piston's answer to a call that ran (status OK): the language and
 * version of the runtime, compile for a compiled runtime, and run, which
 * Piston leaves out when the compile stage failed. NULL when out of
 * memory. */
static json_t *answer(const struct runtime *rt, const struct sbxc_result *res) {
  json_t *a = json_pack("{s:s,s:s}", "language", rt->language, "version", rt->version);
  bool ran = res->compile == NULL || !res->compile->failed;
  struct stage c = res->compile != NULL ? compile_stage(res->compile) : (struct stage){0};
  struct stage r = run_stage(res);
  if (a == NULL ||
      (res->compile != NULL && json_object_set_new(a, "compile", stage_object(&c)) < 0) ||
      (ran && json_object_set_new(a, "run", stage_object(&r)) < 0)) {
    json_decref(a);
    return NULL;
  }
  return a;
}

/* A run that failed inside the server (RunCode's INTERNAL, or a call
 * whose fate is unknown): isolate's XX, with the reason as its message. */
static json_t *internal_run(const char *message) {
  return json_pack("{s:s,s:s,s:s,s:n,s:n,s:s,s:s,s:n,s:n,s:n}", "stdout", "", "stderr", "",
                   "output", "", "code", "signal", "message", message, "status", "XX", "cpu_time",
                   "wall_time", "memory");
}

/* RunCode's refusals in Piston's words: a bad request is 400 (RunCode's
 * message names the RunCode field; the Piston field it came from is put
 * first), a caller the server does not know 401 (caller.h), a full queue
 * or a draining server 503, a call past its deadline 504. */
static void answer_refusal(struct http_response *resp, const struct sbxc_result *res) {
  static const struct {
    const char *rpc, *piston;
  } fields[] = {{"limits.timeout_ms", "run_timeout"},
                {"limits.cpu_time_ms", "run_cpu_time"},
                {"limits.memory_bytes", "run_memory_limit"},
                {"stdin", "stdin"},
                {"args", "args"},
                {"code", "files[0].content"}};
  const char *msg = res->message;
  if (res->status == SBXC_INVALID_ARGUMENT) {
    if (strncmp(msg, "files[", 6) == 0 && strstr(msg, "].path") != NULL) {
      const char *path = strstr(msg, "].path");
      http_response_json_message(resp, 400, "%.*s.name%s", (int)(path - msg + 1), msg,
                                 path + strlen("].path"));
      return;
    }
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
      if (strncmp(msg, fields[i].rpc, strlen(fields[i].rpc)) == 0) {
        http_response_json_message(resp, 400, "%s: %s", fields[i].piston, msg);
        return;
      }
    http_response_json_message(resp, 400, "%s", msg);
    return;
  }
  if (res->status == SBXC_UNAUTHENTICATED) { /* revoked since the request came in */
    struct front_refusal r;
    front_refusal_unauthenticated(&r, msg);
    answer_unauthenticated(resp, &r);
    return;
  }
  unsigned status =
      res->status == SBXC_RESOURCE_EXHAUSTED || res->status == SBXC_UNAVAILABLE ? 503 : 504;
  http_response_json_message(resp, status, "%s", msg);
}

static void handle_execute(void *ctx, const struct http_request *req, struct http_response *resp) {
  struct fronts *f = ctx;
  struct piston_refusal r = {0};
  struct front_caller fc;
  struct front_refusal why;
  if (front_caller_establish(f, req, &fc, &why) < 0) {
    answer_unauthenticated(resp, &why);
    return;
  }
  sbxc_request *rq = sbxc_request_new();
  if (rq == NULL) {
    http_response_json_message(resp, 500, "out of memory");
    return;
  }
  const struct runtime *rt = NULL;
  if (execute_request(f, req, rq, &rt, &r) < 0) {
    sbxc_request_free(rq);
    http_response_json_message(resp, r.status, "%s", r.message);
    return;
  }
  if (fronts_draining(f)) {
    sbxc_request_free(rq);
    http_response_json_message(resp, 503, "the server is shutting down; nothing ran");
    return;
  }
  struct sbxc_result res;
  front_caller_enter(&fc);
  sbxc_run_code(f->client, rq, &res);
  front_caller_leave();
  sbxc_request_free(rq);
  if (res.status == SBXC_OK)
    http_response_json(resp, 200, answer(rt, &res));
  else if (res.status == SBXC_INTERNAL || res.status == SBXC_UNKNOWN)
    http_response_json(resp, 200,
                       json_pack("{s:o,s:s,s:s}", "run", internal_run(res.message), "language",
                                 rt->language, "version", rt->version));
  else
    answer_refusal(resp, &res);
  sbxc_result_free(&res);
}

/* The listener's own refusals under /api/v2/ (404, 405, 413, 415, 421,
 * ...) as Piston answers errors: {"message": ...}. A client reads every
 * answer as JSON (piston-client's res.json()). */
static void piston_error(struct http_response *resp, unsigned status, const char *message) {
  http_response_json_message(resp, status, "%s", message);
}

/* /api/v2/execute also takes a body labelled text/plain from a client that
 * is no browser: the npm piston-client sends its JSON so (node-fetch's
 * type for a string body), though Piston itself wants application/json. */
int piston_add_routes(struct fronts *f, struct http_listener *http, struct sbx_error *err) {
  if (http_listener_errors(http, "/api/v2/", piston_error, err) < 0 ||
      http_listener_route(http, "/api/v2/runtimes", HTTP_GET | HTTP_HEAD, handle_runtimes, f, err) <
          0 ||
      http_listener_route(http, "/api/v2/execute", HTTP_POST | HTTP_TEXT_PLAIN_JSON, handle_execute,
                          f, err) < 0)
    return -1;
  return 0;
}
