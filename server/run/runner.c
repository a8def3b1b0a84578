/* runner.c: the runner's start and stop (the slot workspaces among what it
 * mounts and detaches); see runner.h. Never runs code: run.c does. */
#include "runner.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"
#include "text.h"
#include "workspace.h"

static int open_workspace_root(struct runner *r, struct sbx_error *err) {
  if ((size_t)snprintf(r->workspace_root, sizeof(r->workspace_root), "%s/workspaces",
                       r->settings->state_dir) >= sizeof(r->workspace_root))
    return sbx_error_set(err, SBX_INTERNAL, ENAMETOOLONG, "state dir %s", r->settings->state_dir);
  struct stat before;
  bool existed = stat(r->workspace_root, &before) == 0;
  r->workspace_root_fd = workspace_root_open(r->workspace_root, err);
  if (r->workspace_root_fd < 0)
    return -1;
  r->made_workspace_root = !existed;
  int stale = workspace_remove_stale(r->workspace_root_fd, r->workspace_root);
  if (stale > 0)
    log_line("stale_workspaces", "detached=%d", stale);
  return 0;
}

/* One workspace per slot, mounted at start (runs without a session use
 * it; workspaces.c empties it after each run) and detached at stop. */
static int mount_slot_workspaces(struct runner *r, struct sbx_error *err) {
  r->slot_ws = calloc(r->n_slots, sizeof(*r->slot_ws));
  if (r->slot_ws == NULL)
    return sbx_error_set(err, SBX_INTERNAL, ENOMEM, "workspaces");
  for (unsigned i = 0; i < r->n_slots; i++)
    r->slot_ws[i].fd = -1;
  for (unsigned i = 0; i < r->n_slots; i++) {
    struct slot_workspace *w = &r->slot_ws[i];
    uid_t uid = (uid_t)(r->settings->uid_base + i);
    snprintf(w->name, sizeof(w->name), "slot-%u", i);
    w->size = (uint64_t)r->settings->default_limits.v[LIMIT_DISK_BYTES];
    w->fd = workspace_mount(r->workspace_root_fd, r->workspace_root, w->name, w->size,
                            (uint64_t)r->settings->workspace_inodes, uid, (gid_t)uid, err);
    if (w->fd < 0)
      return -1;
  }
  return 0;
}

static void unmount_slot_workspaces(struct runner *r) {
  for (unsigned i = 0; r->slot_ws != NULL && i < r->n_slots; i++) {
    struct slot_workspace *w = &r->slot_ws[i];
    struct sbx_error err;
    if (w->fd >= 0)
      close(w->fd);
    if (w->name[0] != '\0' &&
        workspace_unmount(r->workspace_root_fd, r->workspace_root, w->name, &err) < 0)
      log_line("workspace_unmount_failed", "slot=%u error=\"%s\"", i, err.msg);
  }
  free(r->slot_ws);
  r->slot_ws = NULL;
}

/* A session's interpreter goes first, before its workspace and group. */
static void end_session_interp(void *interps, struct session *s) {
  interp_session_end(interps, s);
}

/* A session's memory group goes with it, once its tmpfs is gone. */
static void free_session_group(void *engine, uint64_t group) {
  sandbox_group_free(engine, group);
}

static int open_sessions(struct runner *r, struct sbx_error *err) {
  const struct server_settings *s = r->settings;
  if (session_table_init(&r->sessions, (size_t)s->max_sessions,
                         (uint64_t)s->session_ttl_s * 1000u) < 0)
    return sbx_error_set(err, SBX_INTERNAL, ENOMEM, "sessions");
  r->sessions.on_end = free_session_group;
  r->sessions.on_end_arg = r->engine;
  r->sessions.on_doomed = end_session_interp;
  r->sessions.on_doomed_arg = &r->interps;
  r->sessions_ready = true;
  return 0;
}

/* A run's connection through the egress proxy, as it ends (any thread). */
static void count_egress(void *arg, int tenant, bool allowed, uint64_t up, uint64_t down) {
  struct run_stats *st = arg;
  uint64_t add[EGRESS_COUNTS_N] = {allowed, !allowed, up, down};
  for (size_t k = 0; k < EGRESS_COUNTS_N; k++) {
    if (add[k] == 0)
      continue;
    /* A tenant's row exists once counted; bytes follow the first count. */
    const atomic_uint_fast64_t *row =
        tenant >= 0 && tenant_counts_add(&st->egress_by_tenant, EGRESS_COUNTS_N, tenant, k)
            ? tenant_counts_row(&st->egress_by_tenant, (unsigned)tenant)
            : NULL;
    if (row == NULL)
      atomic_fetch_add_explicit(&st->egress[k], add[k], memory_order_relaxed);
    else if (add[k] > 1)
      atomic_fetch_add_explicit((atomic_uint_fast64_t *)&row[k], add[k] - 1, memory_order_relaxed);
  }
}

/* With --egress-allow (checked with egress_run_settings_check): the proxy
 * for runs started, a door for each worker and interpreter. */
static int start_run_egress(struct runner *r, struct sbx_error *err) {
  const struct server_settings *s = r->settings;
  if (s->egress_allow[0] == '\0')
    return 0;
  struct egress_config cfg;
  if (egress_run_config_from(s, r->n_slots + (unsigned)s->max_interpreters, &cfg, err) < 0)
    return -1;
  cfg.on_connection = count_egress;
  cfg.on_connection_arg = &r->stats;
  if (egress_start(&r->egress, &cfg, 0, err) < 0)
    return sbx_error_wrap(err, "egress proxy for runs");
  return 0;
}

/* An interpreter slot's (interp.h, warm_zygote). */
static void warm_interp_zygote(void *arg, unsigned slot) {
  runner_warm_zygote(arg, slot);
}

int runner_load_runtimes(struct runner *r, const struct server_settings *s, struct sbx_error *err) {
  char dir[PATH_MAX] = "";
  bool given = s->runtimes_dir[0] != '\0';
  if (given) {
    snprintf(dir, sizeof dir, "%s", s->runtimes_dir);
  } else {
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    char *slash = n > 0 ? (exe[n] = '\0', strrchr(exe, '/')) : NULL;
    if (slash != NULL) {
      *slash = '\0';
      if ((size_t)snprintf(dir, sizeof dir, "%s/../share/sandboxd/runtimes", exe) >= sizeof dir)
        dir[0] = '\0';
    }
  }
  if ((r->runtimes = calloc(1, sizeof *r->runtimes)) == NULL)
    return sbx_error_set(err, SBX_INTERNAL, ENOMEM, "runtimes");
  return runtimes_load(r->runtimes, dir, given, s->zygote != 0, err);
}

void runner_free_runtimes(struct runner *r) {
  if (r->runtimes != NULL)
    runtimes_free(r->runtimes);
  free(r->runtimes);
  r->runtimes = NULL;
}

int runner_start(struct runner *r, const struct server_settings *s, struct sandbox_engine *engine,
                 const struct egress_config *egress_cfg, struct sbx_error *err) {
  r->settings = s;
  r->engine = engine;
  r->n_slots = (unsigned)s->workers;
  r->workspace_root_fd = -1;
  r->installer.store.dir_fd = -1;
  stats_histogram_init(&r->stats.wall, stats_bounds_run_us, stats_bounds_run_n);
  stats_histogram_init(&r->stats.cpu, stats_bounds_run_us, stats_bounds_run_n);
  stats_histogram_init(&r->stats.queue_wait, stats_bounds_run_us, stats_bounds_run_n);
  struct sbx_error mime_err;
  if (mime_db_load(&r->mime, s->mime_types, &mime_err) < 0)
    log_line("warning", "mime_types=%s error=\"%s\" artifacts get application/octet-stream",
             s->mime_types, mime_err.msg);
  if (open_workspace_root(r, err) < 0)
    return sbx_error_wrap(err, "workspaces");
  if (mount_slot_workspaces(r, err) < 0)
    return sbx_error_wrap(err, "workspaces");
  if (interp_table_init(&r->interps, engine, r->n_slots, (unsigned)s->max_interpreters,
                        (uid_t)s->uid_base, (uint64_t)s->interpreter_idle_s * 1000u,
                        (uint64_t)s->interpreter_max_lifetime_s * 1000u,
                        (uint64_t)s->interpreter_grace_ms) < 0)
    return sbx_error_set(err, SBX_INTERNAL, ENOMEM, "interpreters");
  r->interps.egress = &r->egress;
  r->interps.warm_zygote = s->zygote ? warm_interp_zygote : NULL;
  r->interps.warm_arg = r;
  if (open_sessions(r, err) < 0)
    return -1;
  r->installer.settings = s;
  r->installer.engine = engine;
  r->installer.workspace_root_fd = r->workspace_root_fd;
  r->installer.workspace_root = r->workspace_root;
  if (installer_start(&r->installer, egress_cfg, r->n_slots, err) < 0)
    return -1;
  runtimes_set_python(r->runtimes, r->installer.info.python_version);
  return start_run_egress(r, err);
}

void runner_stop(struct runner *r, bool failed) {
  installer_stop(&r->installer);
  if (r->sessions_ready)
    session_table_destroy(&r->sessions, r->workspace_root_fd, r->workspace_root);
  r->sessions_ready = false;
  interp_table_destroy(&r->interps);
  /* After the interpreters: each closes its door (a lease) as it stops. */
  egress_stop(&r->egress); /* safe when it never started */
  unmount_slot_workspaces(r);
  if (r->workspace_root_fd >= 0)
    close(r->workspace_root_fd);
  r->workspace_root_fd = -1;
  /* After a failed start, what it made, and only when empty (rmdir). */
  if (failed && r->made_workspace_root)
    rmdir(r->workspace_root);
  mime_db_free(&r->mime);
  tenant_counts_destroy(&r->stats.by_tenant);
  tenant_counts_destroy(&r->stats.egress_by_tenant);
}

/* Once, when the engine's matplotlib font list is made (or not). */
static void log_fontlist(struct runner *r) {
  if (r->fontlist_logged)
    return;
  uint64_t ms = 0;
  const char *why = "";
  switch (sandbox_fontlist_poll(r->engine, &ms, &why)) {
  case SANDBOX_FONTLIST_PENDING:
    return;
  case SANDBOX_FONTLIST_READY:
    log_line("matplotlib_fonts", "result=ready ms=%llu", (unsigned long long)ms);
    break;
  case SANDBOX_FONTLIST_ABSENT:
    log_line("matplotlib_fonts", "result=absent msg=\"matplotlib is not installed\"");
    break;
  case SANDBOX_FONTLIST_FAILED:
    log_line("matplotlib_fonts_failed",
             "ms=%llu error=\"%s\" msg=\"runs that plot scan the system's fonts themselves, as "
             "matplotlib does without a cache (about half a second each)\"",
             (unsigned long long)ms, why);
    break;
  }
  r->fontlist_logged = true;
}

void runner_tick(struct runner *r) {
  log_fontlist(r);
  interp_expire(&r->interps);
  session_expire(&r->sessions);
  session_reap(&r->sessions, r->workspace_root_fd, r->workspace_root);
}

size_t runner_zygote_memory(struct runner *r, struct sandbox_zygote_memory **out) {
  *out = NULL;
  if (r->engine == NULL || !r->settings->zygote)
    return 0;
  unsigned slots = sandbox_engine_report(r->engine)->slots;
  struct sandbox_zygote_memory *m = calloc(slots, sizeof(*m));
  if (m == NULL)
    return 0;
  size_t n = sandbox_zygote_memory(r->engine, m, slots);
  if (n == 0) {
    free(m);
    return 0;
  }
  *out = m;
  return n;
}

int runner_warm_zygote(struct runner *r, unsigned slot) {
  uint64_t t0 = sbx_monotonic_ms();
  struct sandbox_error se = {0};
  int rv = sandbox_zygote_warm(r->engine, slot, &se);
  unsigned long long ms = (unsigned long long)(sbx_monotonic_ms() - t0);
  if (rv == 1)
    log_line("zygote_warm", "slot=%u ms=%llu preload=\"%s\"", slot, ms,
             r->settings->zygote_preload);
  if (rv >= 0)
    return 0;
  /* The first line names the module and Python's error (zygote_main.c);
   * the traceback after it stays in the engine's message, which
   * python-zygote runs answer with. */
  char first[400];
  text_printable(se.msg, strcspn(se.msg, "\n"), first, sizeof(first), false);
  log_line("zygote_warm_failed",
           "slot=%u ms=%llu preload=\"%s\" error=\"%s\" msg=\"python-zygote runs fail until a "
           "zygote starts (each tries again); python runs are served\"",
           slot, ms, r->settings->zygote_preload, first);
  return -1;
}
