/* dirs.h: directory streams over directory fds, for the code that walks
 * trees a sandbox wrote (always by fd, never by a path built from them). */
#ifndef SBX_DIRS_H
#define SBX_DIRS_H

#include <dirent.h>
#include <stdbool.h>
#include <string.h>

/* A stream of its own (its own offset) over the directory dir_fd refers
 * to; dir_fd stays the caller's. NULL with errno on failure. Close with
 * closedir (or declare it cleanup_dir). */
DIR *opendir_at(int dir_fd);

/* "." and "..", which every walk skips. */
static inline bool dir_entry_is_dot(const char *name) {
  return name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0'));
}

#endif
