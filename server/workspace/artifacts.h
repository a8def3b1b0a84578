/* artifacts.h: collects the regular files under a run's output/ after the
 * run. The sandbox controls that tree, so this is hostile input: see
 * safefs.h for the rules. Walks directory by directory in name order, so
 * artifacts come out sorted by path and the caps hit the same files every
 * time. */
#ifndef SBX_ARTIFACTS_H
#define SBX_ARTIFACTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "mime.h"

#define ARTIFACT_PATH_MAX 1024

struct artifact {
  char *relative_path; /* below output/ */
  const char *name;    /* points into relative_path */
  uint64_t size;
  const char *mime; /* from the mime db */
  uint8_t *content; /* NULL when omitted (or empty) */
  size_t content_len;
  bool omitted;
};

struct artifact_caps {
  size_t max_count;  /* files reported; more are counted as skipped */
  size_t max_depth;  /* directory levels below output/ */
  uint64_t per_file; /* content inline up to this size */
  uint64_t total;    /* all contents together */
};

struct artifact_set {
  struct artifact *items;
  size_t n, cap;
  uint64_t content_bytes;
  size_t omitted_per_file; /* over caps->per_file */
  size_t omitted_total;    /* would have passed caps->total */
  size_t skipped_special;  /* symlinks, FIFOs, sockets, devices */
  size_t skipped_names;    /* not UTF-8 or path too long */
  size_t skipped_depth;    /* directories deeper than max_depth */
  size_t skipped_count;    /* files past max_count */
};

/* Collects from the directory open as output_fd (not consumed). Returns 0,
 * or -1 with errno when out of memory (set is then freed). Unreadable
 * entries are skipped, never fatal: the run's result still goes out. */
int artifacts_collect(int output_fd, const struct artifact_caps *caps, const struct mime_db *mime,
                      struct artifact_set *set, struct sbx_error *err);
void artifacts_free(struct artifact_set *set);

#endif
