/* run_internal.h: the parts of one run that the run layer's files share:
 * everything a run allocates (freed in one place), and the steps of
 * run_code (run.c) that live in files of their own. */
#ifndef SBX_RUN_INTERNAL_H
#define SBX_RUN_INTERNAL_H

#include "artifacts.h"
#include "feedback.h"
#include "interp.h"
#include "runner.h"
#include "ids.h"
#include "workspace.h"

struct run_scratch {
  char run_id[ID_MAX + 1];
  const char **argv;
  char **env;
  size_t n_env;
  struct workspace_file *files;
  uint8_t **downloads; /* bodies of files by URL, index as files */
  size_t n_files;
  char *code;
  size_t code_len;
  struct sandbox_result result;
  bool have_result;
  struct feedback fb;
  char *fb_lines[FEEDBACK_MAX_LINES];
  struct artifact_set artifacts;
  Sandbox__V1__Artifact *artifact_msgs;
  Sandbox__V1__Artifact **artifact_ptrs;
  /* The requirements' environment, held from the store until the run is
   * over (an environment in use is never evicted). */
  struct envstore *store;
  struct envstore_env *pkg_env;
  char env_site[PATH_MAX];
  bool env_built;  /* this run built it */
  uint64_t env_ms; /* time spent building or waiting for another's build */
  /* Rich results (sandboxd_cell): the last expression's text/plain, read from
   * the workspace after a run (interpreter calls: in sc->interp). */
  uint8_t *result_text;
  size_t result_len;
  bool result_truncated;
  /* An INTERPRETER session's call: its interpreter held, and how it went. */
  bool interp_held;
  unsigned interp_slot;
  struct interp_outcome interp;
  /* allow_net: the run's door while it runs, then what went through it. */
  struct egress_lease *lease;
  bool has_egress;
  struct egress_summary egress;
  Sandbox__V1__EgressSummary egress_msg;
  bool zygote_as_cold; /* python-zygote with allow_net: run as a fresh interpreter */
  /* A compiled runtime's compile stage (compile.c): its result, and
   * whether it failed (then result holds its ending, no output). */
  struct sandbox_result compile;
  bool have_compile;
  bool compile_failed;
  Sandbox__V1__CompileResult compile_msg;
};

/* Where sandboxd_cell leaves a stateless run's result, in the workspace. */
#define RUN_RESULT_FILE ".sandboxd-result"
#define RUN_RESULT_MAX 65536 /* bytes of text/plain, as sandboxd_cell cuts it */

/* inputs.c: what the run needs before its workspace is touched. The
 * requirements' environment, from the store or built now on this slot;
 * then every file given by URL, downloaded. */
int run_prepare_requirements(struct runner *r, unsigned slot, const struct run_call *call,
                             struct run_scratch *sc, struct sbx_error *err);
int run_fetch_files(struct runner *r, const struct run_call *call, struct run_scratch *sc,
                    struct sbx_error *err);

/* workspaces.c: the run's workspace: the slot's tmpfs, or the session's
 * (mounted, resized or handed to this slot's uid as needed). Returns its fd
 * (owned by the slot or the session) and its directory's name. */
int run_acquire_workspace(struct runner *r, unsigned slot, const struct run_call *call,
                          char *dir_name, size_t dir_len, struct sbx_error *err);
/* Empties the slot's workspace (remounting it when that fails). */
void run_release_slot_workspace(struct runner *r, unsigned slot);
/* A session run that could not start beside the session's files. */
int run_check_session_memory(struct runner *r, const struct run_call *call, struct sbx_error *err);

/* net.c: the run's network (allow_net): the proxy variables (how many,
 * then added to sc->env), its lease around the engine's run, and the
 * summary in the reply and feedback. */
size_t run_net_env_count(const struct run_call *call);
int run_net_env(const struct run_call *call, struct run_scratch *sc, struct sbx_error *err);
int run_net_open(struct runner *r, const struct run_call *call, struct run_scratch *sc,
                 struct sbx_error *err);
void run_net_close(struct runner *r, struct run_scratch *sc);
/* An INTERPRETER session's call: the creating call's allow_net becomes the
 * session's; a later call leaves it empty or repeats it (else
 * FAILED_PRECONDITION). */
int run_net_session(const struct run_call *call, struct sbx_error *err);
void run_net_response(struct run_scratch *sc, Sandbox__V1__RunCodeResponse *resp);
void run_net_feedback(const struct run_scratch *sc, struct feedback *fb);

/* compile.c: a compiled runtime's compile stage, before the program:
 * spec as the run's, with the compile command and limits, no stdin, no
 * network, cancel as the run's. 0 (sc->compile_failed says how it went),
 * or -1 with err when the sandbox could not be set up. */
bool run_compiles(const struct run_call *call);
int run_compile(struct runner *r, unsigned slot, const struct run_call *call,
                struct run_scratch *sc, const struct sandbox_spec *spec, struct sbx_error *err);
void run_compile_response(const struct run_call *call, struct run_scratch *sc,
                          Sandbox__V1__RunCodeResponse *resp);

/* response.c: the engine's result as the RunCodeResponse and its feedback,
 * with the artifacts of output/ (ws_fd's). */
void run_build_response(struct runner *r, const struct run_call *call, int ws_fd,
                        struct run_scratch *sc, Sandbox__V1__RunCodeResponse *resp);

#endif
