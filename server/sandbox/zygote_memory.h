/* zygote_memory.h: what other threads see of each slot's zygote (struct
 * zygote_shown, sandbox_spawn.h) and its memory (sandbox_zygote_memory,
 * sandbox.h). zygote.c tells it when a zygote is ready, forks and stops,
 * from the slot's thread; readers only copy under the slot's shown lock,
 * never call into the zygote and never wait for the slot's thread. */
#ifndef SANDBOX_ZYGOTE_MEMORY_H
#define SANDBOX_ZYGOTE_MEMORY_H

#include "sandbox_spawn.h"

/* At engine start and stop, for every slot. */
void zygote_shown_init(struct zygote_shown *s);
void zygote_shown_destroy(struct zygote_shown *s);
/* The slot's thread: a zygote (pid, started for environment, "" or NULL
 * none) is ready; a run was handed to it; it is about to be stopped (call
 * before it is reaped). */
void zygote_shown_ready(struct zygote_shown *s, pid_t pid, const char *environment);
void zygote_shown_forked(struct zygote_shown *s);
void zygote_shown_clear(struct zygote_shown *s);

#endif
