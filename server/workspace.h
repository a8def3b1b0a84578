/* workspace.h: a fresh directory per run under <state_dir>/workspaces.
 *
 * Until the workspaces issue lands, each run gets <root>/<run_id> (mode
 * 0700, owned by the slot's uid and gid) holding main.py and the request's
 * files, and the whole tree is removed after the run. Everything in it after
 * the run was written by the sandbox and is hostile: removal works only with
 * openat/unlinkat relative to directory fds the server opened itself, never
 * following a symlink. */
#ifndef SBX_WORKSPACE_H
#define SBX_WORKSPACE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct workspace_file {
  const char *path; /* validated relative path */
  const uint8_t *data;
  size_t len;
};

/* Opens (creating if needed, mode 0711) the directory that holds the
 * workspaces; returns an O_DIRECTORY fd or -1 with errno. */
int workspace_root_open(const char *path);

/* Creates root/name, writes main.py and files, chowns everything to
 * uid:gid. On failure removes what it made and returns -1 with msg. */
int workspace_create(int root_fd, const char *name, uid_t uid, gid_t gid, const char *code,
                     const struct workspace_file *files, size_t n_files, char *msg, size_t msglen);

/* Removes root/name and everything below it without following symlinks.
 * Returns 0, or -1 with msg when something could not be removed. */
int workspace_remove(int root_fd, const char *name, char *msg, size_t msglen);

#endif
