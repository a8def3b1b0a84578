/* session.c: see session.h. No I/O under the lock. */
#include "session.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"
#include "tenants.h"
#include "workspace.h"

int session_table_init(struct session_table *t, size_t max, uint64_t ttl_ms) {
  memset(t, 0, sizeof(*t));
  t->max = max;
  t->ttl_ms = ttl_ms;
  t->items = calloc(max > 0 ? max : 1, sizeof(*t->items));
  if (t->items == NULL)
    return -1;
  return pthread_mutex_init(&t->lock, NULL) == 0 ? 0 : -1;
}

/* The tenant's session id: another tenant's session of the same id is not
 * it (the same walk, whichever tenant holds the id). */
static ssize_t find(struct session_table *t, const struct tenant *tenant, const char *id) {
  ssize_t found = -1;
  for (size_t i = 0; i < t->n; i++)
    if (t->items[i]->tenant == tenant && strcmp(t->items[i]->id, id) == 0)
      found = (ssize_t)i;
  return found;
}

/* Item i leaves the table: the tenant's count drops. Lock held. */
static struct session *take_out(struct session_table *t, size_t i) {
  struct session *s = t->items[i];
  t->items[i] = t->items[--t->n];
  atomic_fetch_sub(&s->tenant->sessions, 1);
  return s;
}

/* Takes item i out of the table onto the doomed list. Lock held. */
static void doom(struct session_table *t, size_t i, const char *why) {
  struct session *s = take_out(t, i);
  s->next_doomed = t->doomed;
  t->doomed = s;
  log_line("session_end", "tenant=%s session_id=%s reason=%s", s->tenant->name, s->id, why);
}

/* The session to evict when the table is full: the least recently used
 * idle one of the tenant holding the most sessions, so that one tenant's
 * many sessions push out its own before anyone else's. -1: all busy. */
static ssize_t eviction_victim(struct session_table *t) {
  ssize_t victim = -1;
  for (size_t j = 0; j < t->n; j++) {
    struct session *s = t->items[j];
    if (s->busy)
      continue;
    if (victim < 0) {
      victim = (ssize_t)j;
      continue;
    }
    struct session *v = t->items[victim];
    unsigned sn = atomic_load(&s->tenant->sessions), vn = atomic_load(&v->tenant->sessions);
    if (sn > vn || (sn == vn && s->last_used_ms < v->last_used_ms))
      victim = (ssize_t)j;
  }
  return victim;
}

int session_reserve(struct session_table *t, struct tenant *tenant, uint32_t tenant_max,
                    const char *id, struct session **out, bool *created, struct sbx_error *err) {
  *out = NULL;
  *created = false;
  pthread_mutex_lock(&t->lock);
  ssize_t i = find(t, tenant, id);
  if (i >= 0) {
    struct session *s = t->items[i];
    if (s->busy) {
      pthread_mutex_unlock(&t->lock);
      return sbx_error_set(err, SBX_FAILED_PRECONDITION, 0,
                           "session %s already has a run queued or running; retry after it has "
                           "answered",
                           id);
    }
    s->busy = true;
    s->last_used_ms = sbx_monotonic_ms();
    *out = s;
    pthread_mutex_unlock(&t->lock);
    return 0;
  }
  if (t->max == 0) {
    pthread_mutex_unlock(&t->lock);
    return sbx_error_set(err, SBX_FAILED_PRECONDITION, 0,
                         "session_id: sessions are disabled on this server (max-sessions 0)");
  }
  if (tenant_max > 0 && atomic_load(&tenant->sessions) >= tenant_max) {
    pthread_mutex_unlock(&t->lock);
    return sbx_error_set(err, SBX_RESOURCE_EXHAUSTED, 0,
                         "tenant %s has its %u sessions (max_sessions); close one "
                         "(CloseSession) or wait for one to expire",
                         tenant->name, tenant_max);
  }
  if (t->n >= t->max) {
    ssize_t lru = eviction_victim(t);
    if (lru < 0) {
      pthread_mutex_unlock(&t->lock);
      return sbx_error_set(err, SBX_RESOURCE_EXHAUSTED, 0,
                           "all %zu sessions are running; retry later", t->max);
    }
    doom(t, (size_t)lru, "evicted");
  }
  struct session *s = calloc(1, sizeof(*s));
  if (s == NULL) {
    pthread_mutex_unlock(&t->lock);
    return sbx_error_set(err, SBX_INTERNAL, ENOMEM, "sessions");
  }
  snprintf(s->id, sizeof(s->id), "%s", id);
  s->tenant = tenant;
  atomic_fetch_add(&tenant->sessions, 1);
  snprintf(s->dir, sizeof(s->dir), "s-%llu", (unsigned long long)++t->seq);
  s->fd = -1;
  s->busy = true;
  s->last_used_ms = sbx_monotonic_ms();
  t->items[t->n++] = s;
  *out = s;
  *created = true;
  pthread_mutex_unlock(&t->lock);
  return 0;
}

void session_release(struct session_table *t, struct session *s) {
  pthread_mutex_lock(&t->lock);
  s->busy = false;
  s->last_used_ms = sbx_monotonic_ms();
  if (s->fd < 0) {
    ssize_t i = -1;
    for (size_t j = 0; j < t->n; j++)
      if (t->items[j] == s)
        i = (ssize_t)j;
    if (i >= 0)
      free(take_out(t, (size_t)i));
  }
  pthread_mutex_unlock(&t->lock);
}

void session_set_workspace(struct session_table *t, struct session *s, int fd, uid_t uid,
                           uint64_t quota) {
  pthread_mutex_lock(&t->lock);
  s->fd = fd;
  s->uid = uid;
  s->quota = quota;
  pthread_mutex_unlock(&t->lock);
}

int session_open_workspace(struct session_table *t, const struct tenant *tenant, const char *id,
                           struct sbx_error *err) {
  pthread_mutex_lock(&t->lock);
  ssize_t i = find(t, tenant, id);
  int fd = -1;
  if (i >= 0 && t->items[i]->fd >= 0) {
    t->items[i]->last_used_ms = sbx_monotonic_ms();
    fd = fcntl(t->items[i]->fd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0)
      sbx_error_set(err, SBX_INTERNAL, errno, "session %s: duplicate its workspace's fd", id);
  } else {
    sbx_error_set(err, SBX_NOT_FOUND, 0, "no session %s with files", id);
  }
  pthread_mutex_unlock(&t->lock);
  return fd;
}

int session_close(struct session_table *t, const struct tenant *tenant, const char *id,
                  struct sbx_error *err) {
  pthread_mutex_lock(&t->lock);
  ssize_t i = find(t, tenant, id);
  int rv = 0;
  if (i < 0)
    rv = sbx_error_set(err, SBX_NOT_FOUND, 0,
                       "no session %s (never created, closed, expired or evicted)", id);
  else if (t->items[i]->busy)
    rv = sbx_error_set(err, SBX_FAILED_PRECONDITION, 0,
                       "session %s has a run queued or running; close it after the run answered",
                       id);
  else
    doom(t, (size_t)i, "closed");
  pthread_mutex_unlock(&t->lock);
  return rv;
}

size_t session_expire(struct session_table *t) {
  uint64_t now = sbx_monotonic_ms();
  size_t n = 0;
  pthread_mutex_lock(&t->lock);
  for (size_t i = 0; i < t->n;) {
    struct session *s = t->items[i];
    if (!s->busy && now - s->last_used_ms >= t->ttl_ms) {
      doom(t, i, "expired");
      n++;
      continue; /* item i is now another session */
    }
    i++;
  }
  pthread_mutex_unlock(&t->lock);
  return n;
}

size_t session_reap(struct session_table *t, int root_fd, const char *root_path) {
  pthread_mutex_lock(&t->lock);
  struct session *list = t->doomed;
  t->doomed = NULL;
  pthread_mutex_unlock(&t->lock);
  size_t n = 0;
  while (list != NULL) {
    struct session *s = list;
    list = s->next_doomed;
    if (t->on_doomed != NULL)
      t->on_doomed(t->on_doomed_arg, s);
    if (s->fd >= 0) {
      struct sbx_error err;
      close(s->fd);
      if (workspace_unmount(root_fd, root_path, s->dir, &err) < 0)
        log_line("session_reap_failed", "session_id=%s dir=%s error=\"%s\"", s->id, s->dir,
                 err.msg);
    }
    if (s->group != 0 && t->on_end != NULL)
      t->on_end(t->on_end_arg, s->group);
    free(s->egress_allow);
    free(s);
    n++;
  }
  return n;
}

size_t session_count(struct session_table *t) {
  pthread_mutex_lock(&t->lock);
  size_t n = t->n;
  pthread_mutex_unlock(&t->lock);
  return n;
}

void session_table_destroy(struct session_table *t, int root_fd, const char *root_path) {
  pthread_mutex_lock(&t->lock);
  while (t->n > 0)
    doom(t, t->n - 1, "shutdown");
  pthread_mutex_unlock(&t->lock);
  session_reap(t, root_fd, root_path);
  free(t->items);
  pthread_mutex_destroy(&t->lock);
}
