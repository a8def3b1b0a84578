/* zygote_memory.c: see zygote_memory.h. Reads /proc/PID/smaps_rollup of
 * the zygotes only (proc_memory.c), never trusts a pid that may have been
 * reaped and reused: the file is opened first, and read for the figures
 * only when the zygote it was opened for is still the one shown after
 * the read (a zygote is unshown before it is reaped). */
#include "zygote_memory.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cleanup.h"
#include "clock.h"
#include "proc_memory.h"

void zygote_shown_init(struct zygote_shown *s) {
  memset(s, 0, sizeof *s);
  pthread_mutex_init(&s->mu, NULL);
}

void zygote_shown_destroy(struct zygote_shown *s) {
  pthread_mutex_destroy(&s->mu);
}

void zygote_shown_ready(struct zygote_shown *s, pid_t pid, const char *environment) {
  uint64_t now = sbx_monotonic_ms();
  pthread_mutex_lock(&s->mu);
  s->pid = pid;
  s->generation++;
  s->forks = 0;
  s->started_ms = now;
  snprintf(s->environment, sizeof s->environment, "%s", environment != NULL ? environment : "");
  pthread_mutex_unlock(&s->mu);
}

void zygote_shown_forked(struct zygote_shown *s) {
  pthread_mutex_lock(&s->mu);
  s->forks++;
  pthread_mutex_unlock(&s->mu);
}

void zygote_shown_clear(struct zygote_shown *s) {
  pthread_mutex_lock(&s->mu);
  s->pid = 0;
  pthread_mutex_unlock(&s->mu);
}

/* A copy of what s shows; false when no zygote is ready. */
static bool shown_copy(struct zygote_shown *s, struct zygote_shown *copy) {
  pthread_mutex_lock(&s->mu);
  copy->pid = s->pid;
  copy->generation = s->generation;
  copy->forks = s->forks;
  copy->started_ms = s->started_ms;
  memcpy(copy->environment, s->environment, sizeof copy->environment);
  pthread_mutex_unlock(&s->mu);
  return copy->pid != 0;
}

static bool shown_still(struct zygote_shown *s, uint64_t generation) {
  pthread_mutex_lock(&s->mu);
  bool same = s->pid != 0 && s->generation == generation;
  pthread_mutex_unlock(&s->mu);
  return same;
}

/* Slot's zygote into out: false when there is none, or it ended or was
 * replaced while it was read. */
static bool read_one(struct zygote_shown *s, unsigned slot, struct sandbox_zygote_memory *out) {
  struct zygote_shown seen;
  if (!shown_copy(s, &seen))
    return false;
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/smaps_rollup", (int)seen.pid);
  cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC);
  struct proc_memory m;
  if (fd < 0 || proc_memory_read_fd(fd, &m) < 0 || !shown_still(s, seen.generation))
    return false;
  *out = (struct sandbox_zygote_memory){.slot = slot,
                                        .rss_bytes = m.rss_bytes,
                                        .pss_bytes = m.pss_bytes,
                                        .forks = seen.forks,
                                        .age_ms = sbx_monotonic_ms() - seen.started_ms};
  memcpy(out->environment, seen.environment, sizeof out->environment);
  return true;
}

size_t sandbox_zygote_memory(struct sandbox_engine *e, struct sandbox_zygote_memory *out,
                             size_t max) {
  size_t n = 0;
  if (e->zygote_fd < 0)
    return 0;
  for (unsigned i = 0; i < e->config.slots && n < max; i++)
    if (read_one(&e->slots[i].zygote.shown, i, &out[n]))
      n++;
  return n;
}
