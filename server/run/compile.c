/* compile.c: the compile stage of a compiled runtime (docs/RUNTIMES.md):
 * the manifest's compile command, run by the engine in the run's own
 * workspace with the same isolation as the program, its own limits, no
 * stdin and no network. When it fails (killed, or a non-zero exit) the
 * program is not run, and the reply says so: the run's ending is the
 * compiler's, its output is in RunCodeResponse.compile. */
#include <string.h>

#include "clock.h"
#include "run_internal.h"

bool run_compiles(const struct run_call *call) {
  const struct runtime *rt = call->runtime;
  return rt->kind == RUNTIME_KIND_MANIFEST && rt->manifest.has_compile &&
         call->check != RUN_CHECK_VERSION;
}

int run_compile(struct runner *r, unsigned slot, const struct run_call *call,
                struct run_scratch *sc, const struct sandbox_spec *spec, struct sbx_error *err) {
  const struct runtime_command *cmd = &call->runtime->manifest.compile;
  /* A cancel ends the compiler as it would the program; its output is not
   * streamed (WatchRun sees the program's). */
  struct sandbox_stream cancel_only = {.cancel_fd =
                                           call->stream != NULL ? call->stream->cancel_fd : -1};
  struct sandbox_spec c = *spec;
  c.argv = (const char *const *)cmd->argv;
  c.stdin_data = NULL;
  c.stdin_len = 0;
  c.limits = call->compile_limits;
  c.network = SANDBOX_NETWORK_NONE;
  c.netns_fd = 0;
  c.stream = &cancel_only;
  struct sandbox_error se = {0};
  if (sandbox_run(r->engine, slot, &c, &sc->compile, &se) < 0)
    return sbx_error_from_engine(err, SBX_INTERNAL, &se,
                                 "sandbox setup failed for the compile stage, nothing ran");
  sc->have_compile = true;
  const struct sandbox_result *cr = &sc->compile;
  sc->compile_failed = cr->killed_by != SANDBOX_KILLED_BY_NONE || cr->exit_code != 0;
  if (!sc->compile_failed)
    return 0;
  /* The run's ending is the compiler's; the output stays in compile. */
  sc->result = (struct sandbox_result){
      .killed_by = cr->killed_by,
      .cpu_time_exceeded = cr->cpu_time_exceeded,
      .exit_code = cr->exit_code,
      .signal = cr->signal,
      .wall_time_us = cr->wall_time_us,
      .cpu_time_us = cr->cpu_time_us,
      .peak_memory_bytes = cr->peak_memory_bytes,
      .backend = cr->backend,
      .memory_per_process = cr->memory_per_process,
      .limits = cr->limits,
  };
  sc->have_result = true;
  return 0;
}

void run_compile_response(const struct run_call *call, struct run_scratch *sc,
                          Sandbox__V1__RunCodeResponse *resp) {
  if (!sc->have_compile)
    return;
  const struct sandbox_result *cr = &sc->compile;
  Sandbox__V1__CompileResult *m = &sc->compile_msg;
  sandbox__v1__compile_result__init(m);
  m->stdout = (ProtobufCBinaryData){cr->stdout_len, cr->stdout_data};
  m->stderr = (ProtobufCBinaryData){cr->stderr_len, cr->stderr_data};
  m->stdout_truncated = cr->stdout_truncated;
  m->stderr_truncated = cr->stderr_truncated;
  m->killed_by = (Sandbox__V1__KilledBy)cr->killed_by;
  m->exit_code = cr->exit_code;
  m->signal = cr->signal;
  m->wall_time_ms = sbx_us_to_ms_ceil(cr->wall_time_us);
  m->cpu_time_ms = cr->cpu_time_us / 1000;
  m->peak_memory_bytes = cr->peak_memory_bytes;
  m->failed = sc->compile_failed;
  resp->compile = m;
  if (sc->compile_failed && cr->killed_by == SANDBOX_KILLED_BY_NONE)
    feedback_add(&sc->fb,
                 "the compile stage failed: %s exited with status %d, the program did not run; "
                 "see compile.stderr",
                 call->runtime->manifest.compile.argv[0], cr->exit_code);
  else if (sc->compile_failed)
    feedback_add(&sc->fb, "the compile stage was killed: the program did not run");
}
