/* fuzz_request: libFuzzer harness over everything sandboxd does with a
 * request's bytes before a worker sees it, in the server's own order:
 * decode_request (envelope with the bounded allocator, method
 * check, NUL bytes in strings, the method's request), then what the
 * method's handler checks before any I/O: validate_run_request (limits,
 * ids, file paths, URLs, env keys, requirement strings) and the requirement
 * set for RunCode, the session id and path checks for the session calls.
 * Built with clang, ASan and UBSan by scripts/fuzz; any crash, sanitizer
 * report or broken invariant below aborts the run. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decode.h"
#include "requirements.h"
#include "runtimes.h"
#include "sandbox.pb-c.h"
#include "ids.h"
#include "settings.h"
#include "validate.h"

static void require(int cond, const char *what) {
  if (!cond) {
    fprintf(stderr, "fuzz_request: invariant broken: %s\n", what);
    abort();
  }
}

/* Answers go back to clients as text: bounded, terminated. */
static void check_message(const char *msg, size_t cap) {
  require(memchr(msg, '\0', cap) != NULL, "message is NUL-terminated within its buffer");
}

static void fuzz_run_code(const Sandbox__V1__RunCodeRequest *req,
                          const struct server_settings *settings,
                          const struct runtime_table *runtimes) {
  struct sandbox_limits limits, compile;
  const struct runtime *rt = NULL;
  struct sbx_error err = {0};
  int rc =
      validate_run_request(req, settings, runtimes, NULL, "", NULL, &limits, &compile, &rt, &err);
  check_message(err.msg, sizeof(err.msg));
  require(rc == 0 || err.code == SBX_INVALID_ARGUMENT || err.code == SBX_FAILED_PRECONDITION,
          "validation refuses as INVALID_ARGUMENT (FAILED_PRECONDITION: an unavailable runtime, "
          "INTERPRETER sessions off)");
  if (rc == 0) {
    require(rt != NULL && rt->available, "an accepted run has an available runtime");
    require(compile.timeout_ms == 0 ||
                (rt->kind == RUNTIME_KIND_MANIFEST && rt->manifest.has_compile &&
                 compile.cpu_time_ms <= compile.timeout_ms),
            "compile limits only for a compiled runtime, CPU at most wall");
    /* What validation promises the worker. */
    require(req->code[0] != '\0', "accepted code is not empty");
    require(limits.timeout_ms >= 1 &&
                limits.timeout_ms <= (uint64_t)settings->max_limits.v[LIMIT_TIMEOUT_MS],
            "accepted timeout within its range");
    require(limits.cpu_time_ms <= limits.timeout_ms, "CPU limit at most the wall limit");
    require(limits.memory_bytes >= (8u << 20) &&
                limits.memory_bytes <= (uint64_t)settings->max_limits.v[LIMIT_MEMORY_BYTES],
            "accepted memory within its range");
    require(limits.max_processes >= 1 &&
                limits.max_processes <= (uint64_t)settings->max_limits.v[LIMIT_MAX_PROCESSES],
            "accepted process count within its range");
    for (size_t i = 0; i < req->n_files; i++)
      require(validate_relative_path(req->files[i]->path), "accepted file paths are relative");
    struct requirement_set set;
    /* With URLs allowed too: the direct-reference parser sees every input. */
    if (requirement_set_build((const char *const *)req->requirements, req->n_requirements, true,
                              &set, &err) >= 0) {
      for (size_t i = 0; i < set.n; i++) {
        const char *url = requirement_url(set.items[i]);
        require(url == NULL || strncmp(url, "http", 4) == 0, "a URL requirement is http(s)");
      }
      requirement_set_free(&set);
    }
    if (requirement_set_build((const char *const *)req->requirements, req->n_requirements, false,
                              &set, &err) >= 0)
      requirement_set_free(&set);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static struct server_settings settings;
  static struct runtime_table runtimes;
  static int ready;
  if (!ready) {
    settings_defaults(&settings);
    /* Any allow_net entry that parses passes the ceiling: the parser and
     * check_allow_net see every entry the fuzzer makes. */
    snprintf(settings.egress_allow, sizeof settings.egress_allow, "*:*,0.0.0.0/0:*,[::/0]:*");
    /* The shipped manifests, python-zygote too; all available but the
     * last (one unavailable runtime): the resolver sees every name,
     * language and version range the fuzzer makes. */
    struct sbx_error lerr;
    require(runtimes_load(&runtimes, SBX_SOURCE_DIR "/deploy/runtimes", true, true, &lerr) == 0,
            "deploy/runtimes loads");
    runtimes_set_python(&runtimes, "3.11.2");
    for (size_t i = 0; i + 1 < runtimes.n; i++)
      if (runtimes.v[i].kind == RUNTIME_KIND_MANIFEST) {
        runtimes.v[i].available = true;
        snprintf(runtimes.v[i].version, sizeof runtimes.v[i].version, "12.2.0");
      }
    ready = 1;
  }
  struct sbx_bounded_alloc alloc;
  struct decoded_request req;
  struct sbx_error err = {0};
  int rc = decode_request(data, size, &alloc, &req, &err);
  check_message(err.msg, sizeof(err.msg));
  check_message(req.request_id, sizeof(req.request_id));
  if (rc != 0) {
    require(err.code == SBX_INVALID_ARGUMENT || err.code == SBX_UNIMPLEMENTED,
            "a refused request is INVALID_ARGUMENT or UNIMPLEMENTED");
    require(req.input == NULL, "nothing decoded on error");
    return 0;
  }
  require(req.input != NULL && req.method != NULL, "a decoded request on success");
  require(req.method_index < sandbox__v1__sandbox__descriptor.n_methods, "method index checked");
  const ProtobufCMessageDescriptor *in = req.method->input;
  if (in == &sandbox__v1__run_code_request__descriptor) {
    fuzz_run_code((const Sandbox__V1__RunCodeRequest *)req.input, &settings, &runtimes);
  } else if (in == &sandbox__v1__list_files_request__descriptor) {
    const Sandbox__V1__ListFilesRequest *r = (const void *)req.input;
    (void)id_valid(r->session_id);
    (void)validate_relative_path(r->path);
  } else if (in == &sandbox__v1__read_file_request__descriptor) {
    const Sandbox__V1__ReadFileRequest *r = (const void *)req.input;
    (void)id_valid(r->session_id);
    (void)validate_relative_path(r->path);
  } else if (in == &sandbox__v1__close_session_request__descriptor) {
    (void)id_valid(((const Sandbox__V1__CloseSessionRequest *)req.input)->session_id);
  }
  protobuf_c_message_free_unpacked(req.input, &alloc.base);
  require(alloc.used == 0, "the bounded allocator got back every byte it handed out");
  return 0;
}
