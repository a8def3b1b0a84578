/* etc.h: the sandbox's /etc and its per-slot user databases, written once at
 * engine start (etc.c). */
#ifndef SANDBOX_ETC_H
#define SANDBOX_ETC_H

#include <sys/types.h>

#include "sandbox.h"

/* Writes etc (bound read-only at /etc in every run) and, in users, passwd.N
 * and group.N for each slot N (bound over /etc/passwd and /etc/group in
 * slot N's runs). Returns 0, or -1 with err (the caller removes both). */
int etc_write(const char *etc, const char *users, uid_t uid_base, gid_t gid_base, unsigned slots,
              struct sandbox_error *err);
/* Removes both directories (either may be ""). */
void etc_remove(const char *etc, const char *users);
/* Removes the directories of engines that are gone (etc.<pid>, users.<pid>). */
void etc_remove_stale(const char *state_dir);

#endif
