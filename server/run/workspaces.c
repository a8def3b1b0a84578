/* workspaces.c: where a run's /workspace comes from: the slot's persistent
 * tmpfs (emptied after each run) or the session's (mounted by its first
 * run, resized when a run asks for another quota, handed to this slot's uid
 * when another slot ran it last), and the memory its files hold. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "log.h"
#include "run_internal.h"
#include "text.h"

/* The interpreter needs this much beside a session's files to start. */
#define SESSION_MEMORY_HEADROOM (16ull << 20)

int run_check_session_memory(struct runner *r, const struct run_call *call, struct sbx_error *err) {
  if (call->session == NULL || call->session->group == 0)
    return 0;
  uint64_t used = 0, limit = call->limits.memory_bytes;
  struct sandbox_error se = {0};
  if (sandbox_group_memory(r->engine, call->session->group, &used, &se) < 0)
    return 0; /* no figure: the run's own limit still holds */
  if (used + SESSION_MEMORY_HEADROOM <= limit)
    return 0;
  char u[32], l[32], h[32];
  text_format_bytes(used, u, sizeof(u));
  text_format_bytes(limit, l, sizeof(l));
  text_format_bytes(SESSION_MEMORY_HEADROOM, h, sizeof(h));
  return sbx_error_set(err, SBX_FAILED_PRECONDITION, 0,
                       "limits.memory_bytes: the session's files take %s of memory (a session's "
                       "workspace lives in memory and counts against its runs' memory), which "
                       "leaves less than %s of the %s this run asks for; ask for more "
                       "memory_bytes or remove files",
                       u, h, l);
}

static int slot_workspace(struct runner *r, unsigned slot, uint64_t quota, struct sbx_error *err) {
  struct slot_workspace *w = &r->slot_ws[slot];
  uid_t uid = (uid_t)(r->settings->uid_base + slot);
  uint64_t inodes = (uint64_t)r->settings->workspace_inodes;
  if (w->fd < 0) { /* an earlier remount failed: try again */
    w->fd = workspace_mount(r->workspace_root_fd, r->workspace_root, w->name, quota, inodes, uid,
                            (gid_t)uid, err);
    if (w->fd < 0)
      return -1;
    w->size = quota;
  }
  if (w->size != quota) {
    if (workspace_resize(r->workspace_root, w->name, quota, inodes, err) < 0)
      return -1;
    w->size = quota;
  }
  return w->fd;
}

/* A session's first run: its memory group, then its tmpfs. */
static int new_session_workspace(struct runner *r, struct session *s, uid_t uid, uint64_t quota,
                                 struct sbx_error *err) {
  /* Ended sessions first: their memory is what this one may need. */
  session_reap(&r->sessions, r->workspace_root_fd, r->workspace_root);
  struct sandbox_error se = {0};
  uint64_t group = 0;
  if (sandbox_group_new(r->engine, &group, &se) < 0)
    return sbx_error_from_engine(err, SBX_INTERNAL, &se, "session memory group");
  int fd = workspace_mount(r->workspace_root_fd, r->workspace_root, s->dir, quota,
                           (uint64_t)r->settings->workspace_inodes, uid, (gid_t)uid, err);
  if (fd < 0) {
    sandbox_group_free(r->engine, group);
    return -1;
  }
  s->group = group;
  session_set_workspace(&r->sessions, s, fd, uid, quota);
  return fd;
}

/* A run that asks for a quota gets it: the session's tmpfs is resized,
 * unless its files already use more. Without disk_bytes it stays. */
static int resize_session(struct runner *r, const struct run_call *call, uint64_t quota,
                          struct sbx_error *err) {
  struct session *s = call->session;
  const Sandbox__V1__Limits *asked = call->req->limits;
  if (asked == NULL || asked->disk_bytes <= 0 || s->quota == quota)
    return 0;
  struct statvfs st;
  if (fstatvfs(s->fd, &st) < 0)
    return sbx_error_set(err, SBX_INTERNAL, errno, "session workspace");
  uint64_t used = (uint64_t)(st.f_blocks - st.f_bfree) * st.f_frsize;
  if (used > quota) {
    char want[32], have[32];
    text_format_bytes(quota, want, sizeof(want));
    text_format_bytes(used, have, sizeof(have));
    return sbx_error_set(err, SBX_FAILED_PRECONDITION, 0,
                         "limits.disk_bytes: the session's files already use %s, more than the "
                         "%s this run asks for; ask for more, or remove files first",
                         have, want);
  }
  if (workspace_resize(r->workspace_root, s->dir, quota, (uint64_t)r->settings->workspace_inodes,
                       err) < 0)
    return -1;
  session_set_workspace(&r->sessions, s, s->fd, s->uid, quota);
  return 0;
}

int run_acquire_workspace(struct runner *r, unsigned slot, const struct run_call *call,
                          char *dir_name, size_t dir_len, struct sbx_error *err) {
  uint64_t quota = call->limits.tmp_bytes; /* disk_bytes: every tmpfs of the run */
  uid_t uid = (uid_t)(r->settings->uid_base + slot);
  struct session *s = call->session;
  if (s == NULL) {
    snprintf(dir_name, dir_len, "%s", r->slot_ws[slot].name);
    return slot_workspace(r, slot, quota, err);
  }
  snprintf(dir_name, dir_len, "%s", s->dir);
  if (s->fd < 0)
    return new_session_workspace(r, s, uid, quota, err);
  if (resize_session(r, call, quota, err) < 0)
    return -1;
  if (s->uid != uid) {
    if (workspace_chown_tree(s->fd, uid, (gid_t)uid, err) < 0) {
      if (err->errnum == ELOOP)
        err->code = SBX_FAILED_PRECONDITION;
      return -1;
    }
    session_set_workspace(&r->sessions, s, s->fd, uid, s->quota);
  }
  return s->fd;
}

void run_release_slot_workspace(struct runner *r, unsigned slot) {
  struct slot_workspace *w = &r->slot_ws[slot];
  uid_t uid = (uid_t)(r->settings->uid_base + slot);
  struct sbx_error err;
  if (w->fd >= 0 && workspace_empty(w->fd, &err) == 0)
    return;
  /* A tree it cannot remove: a fresh tmpfs, so the next run starts clean. */
  if (w->fd >= 0)
    log_line("workspace_empty_failed", "slot=%u error=\"%s\"; remounting", slot, err.msg);
  if (w->fd >= 0)
    close(w->fd);
  w->fd = -1;
  if (workspace_unmount(r->workspace_root_fd, r->workspace_root, w->name, &err) < 0 ||
      (w->fd = workspace_mount(r->workspace_root_fd, r->workspace_root, w->name, w->size,
                               (uint64_t)r->settings->workspace_inodes, uid, (gid_t)uid, &err)) < 0)
    log_line("workspace_remount_failed", "slot=%u error=\"%s\"", slot, err.msg);
}
