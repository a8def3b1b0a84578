/* zygote.h: the engine's side of zygotes (docs/ZYGOTE.md): starting and
 * replacing a slot's zygote, handing it a run, taking the run's first
 * process into the slot's cgroup. zygote_main.c is the other side. */
#ifndef SANDBOX_ZYGOTE_H
#define SANDBOX_ZYGOTE_H

#include "sandbox_spawn.h"

/* At engine start and stop (zygote_fd, zygote_home; every slot's zygote). */
int zygote_engine_init(struct sandbox_engine *e, struct sandbox_error *err);
void zygote_engine_release(struct sandbox_engine *e);

/* Whether spec may run in a zygote (argv, no network, extra mounts under
 * /usr/); 0 or -1 with err. */
int zygote_check_spec(const struct sandbox_engine *e, const struct sandbox_spec *spec,
                      struct sandbox_error *err);
/* A running zygote for spec's extra mounts in slot: the one there (0), or
 * a fresh one (1) when there is none, it died, it is due for recycling or
 * it was built for other mounts; -1 with err. */
int zygote_ensure(struct sandbox_engine *e, unsigned slot, const struct sandbox_spec *spec,
                  struct sandbox_error *err);
/* Hands a run to the slot's zygote: a's plan, argv, environment and
 * rlimits, its stdio and report_child (the run's end of the report
 * socket). The caller then closes its copies of the child's ends. */
int zygote_send_run(struct sandbox_engine *e, unsigned slot, const struct child_args *a,
                    int report_child, struct sandbox_error *err);
/* Waits for the run's first process to say HELLO on report (the parent's
 * end, SO_PASSCRED set), places it in the slot's cgroups and lets it go.
 * Returns its pid (in our namespace) and its pidfd, or -1 with err; a
 * setup error it reported instead is in *setup (kind SETUP_ERROR). */
pid_t zygote_take_run(struct sandbox_engine *e, unsigned slot, int report, int *pidfd,
                      struct child_report *setup, struct sandbox_error *err);

#endif
