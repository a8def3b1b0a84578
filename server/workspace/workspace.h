/* workspace.h: the /workspace of a run, a tmpfs of its own.
 *
 * Each workspace is a tmpfs mounted by the server under
 * <state_dir>/workspaces (size = the disk quota, a bounded number of inodes,
 * nosuid, nodev, root mode 0700 owned by the slot's uid): writing past the
 * quota fails with ENOSPC inside the sandbox, the server's disk is never
 * touched, and the pages are charged to the memory cgroup of the writer.
 * Runs without a session use one persistent tmpfs per worker slot, emptied
 * after every run; each session has its own (see session.h and
 * docs/WORKSPACES.md).
 *
 * After a run everything in a workspace was written by the sandbox and is
 * hostile: the functions here work only with openat/unlinkat/fchownat
 * relative to directory fds the server opened itself, never follow a
 * symlink and replace whatever the sandbox left where the server writes. */
#ifndef SBX_WORKSPACE_H
#define SBX_WORKSPACE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "error.h"

/* The directories of a run's workspace. */
#define WORKSPACE_SCRIPT "main.py"
#define WORKSPACE_MOUNTS "mounts"
#define WORKSPACE_OUTPUT "output"
/* Session trees deeper than this are refused rather than walked. */
#define WORKSPACE_MAX_DEPTH 256

struct workspace_file {
  const char *path; /* validated relative path, below mounts/ */
  const uint8_t *data;
  size_t len;
};

/* Opens (creating if needed, mode 0711) the directory that holds the
 * workspaces; returns an O_DIRECTORY fd or -1 with err. */
int workspace_root_open(const char *path, struct sbx_error *err);

/* Creates root/name (mode 0700) and mounts a tmpfs of size bytes and inodes
 * inodes on it, root owned by uid:gid mode 0700. Returns an O_DIRECTORY fd
 * of the tmpfs's root, or -1 with err (nothing left behind). */
int workspace_mount(int root_fd, const char *root_path, const char *name, uint64_t size,
                    uint64_t inodes, uid_t uid, gid_t gid, struct sbx_error *err);

/* Changes the size of the tmpfs mounted at root_path/name. Fails (EINVAL)
 * when it holds more than size. */
int workspace_resize(const char *root_path, const char *name, uint64_t size, uint64_t inodes,
                     struct sbx_error *err);

/* Detaches the tmpfs at root_path/name (its memory is freed once the last
 * fd on it is closed) and removes the mount point. */
int workspace_unmount(int root_fd, const char *root_path, const char *name, struct sbx_error *err);

/* Writes the code as main.py and the files under mounts/, creates output/,
 * all owned by uid:gid, replacing whatever the sandbox left at those names
 * (a symlink, a FIFO, a directory...). Returns 0 or -1 with err; err->errnum
 * ENOSPC or EDQUOT when it did not fit in the quota. */
/* Creates dir_fd/path (parents made as needed, never through a symlink)
 * with data, owned by uid:gid, replacing what was there. Returns 0, or -1
 * with err (errnum: the errno). */
int workspace_write_file(int dir_fd, const char *path, const uint8_t *data, size_t len, uid_t uid,
                         gid_t gid, struct sbx_error *err);

/* output/, the files under mounts/, and the code as script (a file name:
 * WORKSPACE_SCRIPT, or a runtime's file). */
int workspace_prepare(int ws_fd, uid_t uid, gid_t gid, const char *script, const char *code,
                      size_t code_len, const struct workspace_file *files, size_t n_files,
                      struct sbx_error *err);

/* Removes everything in the workspace open as ws_fd, without following
 * symlinks, whatever the depth. */
int workspace_empty(int ws_fd, struct sbx_error *err);

/* Gives every entry of the tree to uid:gid (never following a symlink), so
 * that a session's files stay writable when its next run is in another
 * slot. Fails with ELOOP on trees deeper than WORKSPACE_MAX_DEPTH. */
int workspace_chown_tree(int ws_fd, uid_t uid, gid_t gid, struct sbx_error *err);

/* Removes root/name and everything below it without following symlinks.
 * Returns 0, or -1 with err when something could not be removed. */
int workspace_remove(int root_fd, const char *name, struct sbx_error *err);

/* At start: detaches every mount under root_path (a crashed server's
 * workspaces) and removes everything in root_fd. Never looks outside
 * root_path. Returns the number of mounts detached. */
int workspace_remove_stale(int root_fd, const char *root_path);

#endif
