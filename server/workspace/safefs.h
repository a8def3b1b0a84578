/* safefs.h: reading trees a sandbox wrote, safely. Runs as root against
 * hostile input: every call is relative to a directory fd the server opened,
 * every component is opened with O_NOFOLLOW, nothing is opened before
 * fstatat says it is a regular file or a directory, files are opened
 * O_NONBLOCK and checked again with fstat, sizes are capped before reading.
 * Used for artifacts, ListFiles and ReadFile. */
#ifndef SBX_SAFEFS_H
#define SBX_SAFEFS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "error.h"

/* Failures say why as a client is told: NOT_FOUND for a missing path,
 * FAILED_PRECONDITION for a symlink, a non-directory on the way, a
 * directory, FIFO, socket or device; INTERNAL otherwise (err->errnum). */

/* Opens the directory rel below root_fd ("" = root_fd itself), never
 * following a symlink. Returns an fd, or -1 with err. */
int safefs_open_dir(int root_fd, const char *rel, struct sbx_error *err);

/* Opens the regular file rel below root_fd for reading, never a symlink,
 * FIFO, socket, device or directory. *st gets its fstat. Returns an fd, or
 * -1 with err. */
int safefs_open_file(int root_fd, const char *rel, struct stat *st, struct sbx_error *err);

/* Reads up to len bytes at offset from fd into a malloc'd buffer. */
int safefs_pread(int fd, uint64_t offset, size_t len, uint8_t **out, size_t *out_len,
                 struct sbx_error *err);

enum safefs_type { SAFEFS_OTHER = 0, SAFEFS_FILE = 1, SAFEFS_DIR = 2, SAFEFS_SYMLINK = 3 };

struct safefs_entry {
  char *name;
  enum safefs_type type;
  uint64_t size;
};

struct safefs_listing {
  struct safefs_entry *entries; /* sorted by name */
  size_t n;
  bool truncated; /* more than max entries, or names not valid UTF-8, left out */
};

/* Lists the directory open as dir_fd (not consumed), at most max entries. */
int safefs_list(int dir_fd, size_t max, struct safefs_listing *out, struct sbx_error *err);
void safefs_listing_free(struct safefs_listing *l);

/* Reads every name in the directory open as dir_fd (not consumed), sorted
 * with strcmp, at most max (*truncated set when there were more). */
int safefs_read_names(int dir_fd, size_t max, char ***names, size_t *n, bool *truncated,
                      struct sbx_error *err);
void safefs_free_names(char **names, size_t n);

#endif
