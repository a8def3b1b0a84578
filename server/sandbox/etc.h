/* etc.h: the sandbox's /etc and its per-slot user databases, written once at
 * engine start (etc.c). */
#ifndef SANDBOX_ETC_H
#define SANDBOX_ETC_H

#include <stddef.h>
#include <sys/types.h>

#include "sandbox.h"

/* Writes etc (bound read-only at /etc in every run) and, in users, passwd.N
 * and group.N for each slot N (bound over /etc/passwd and /etc/group in
 * slot N's runs). Returns 0, or -1 with err (the caller removes both). */
int etc_write(const char *etc, const char *users, uid_t uid_base, gid_t gid_base, unsigned slots,
              struct sandbox_error *err);
/* Creates (0644, truncating; never through a symlink) or replaces path
 * with data: /etc's files here, the Python helpers (pylib.c). 0, or -1
 * with err. */
int etc_write_file(const char *path, const void *data, size_t len, struct sandbox_error *err);
/* Removes both directories (either may be ""). */
void etc_remove(const char *etc, const char *users);
/* Removes the directories of engines that are gone (etc.<pid>, users.<pid>). */
void etc_remove_stale(const char *state_dir);

#endif
