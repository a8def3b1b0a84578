/* manifest.h: one runtime's manifest (docs/RUNTIMES.md), a small JSON file
 * in the runtimes directory, read and checked whole: an unknown key, a
 * wrong type, a relative program path, a name outside its alphabet or a
 * size past its cap is refused, naming the file and the key. Pure: reads
 * the one file it is given, runs nothing. The manifests are the operator's
 * (like --config), not a request's; still, nothing in one can widen the
 * sandbox: mounts are read-only binds of existing host directories below
 * /opt, and limits only change defaults within the server's maxima. */
#ifndef SBX_RUNTIME_MANIFEST_H
#define SBX_RUNTIME_MANIFEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "settings.h"

#define RUNTIME_NAME_MAX 32 /* name, language, an alias: [a-z0-9][a-z0-9.+_-]* */
#define RUNTIME_ALIASES_MAX 16
#define RUNTIME_ARGV_MAX 32  /* a command's words */
#define RUNTIME_WORD_MAX 512 /* one word of a command, one env value */
#define RUNTIME_ENV_MAX 16
#define RUNTIME_MOUNTS_MAX 4
#define RUNTIME_FILE_MAX 64 /* the program's file name in /workspace */
#define RUNTIME_SELF_TEST_MAX 4096
#define RUNTIME_MANIFEST_MAX (64 * 1024) /* bytes of one manifest file */

/* A command: argv[0] an absolute path, argv NULL-terminated. */
struct runtime_command {
  char *argv[RUNTIME_ARGV_MAX + 1];
  size_t argc;
};

struct runtime_manifest {
  char name[RUNTIME_NAME_MAX + 1];
  char language[RUNTIME_NAME_MAX + 1];
  char aliases[RUNTIME_ALIASES_MAX][RUNTIME_NAME_MAX + 1];
  size_t n_aliases;
  /* The version: pattern (a POSIX extended regular expression with one
   * group) applied to what command prints (stdout, then stderr), in the
   * sandbox at start. */
  struct runtime_command version_command;
  char *version_pattern;
  char file[RUNTIME_FILE_MAX + 1]; /* the code is written as /workspace/<file> */
  /* Optional: the compile stage (has_compile), its own default limits
   * above the server's (0: the server's), and why. */
  bool has_compile;
  struct runtime_command compile;
  int64_t compile_limits[LIMITS_N];
  char *compile_limits_why;
  struct runtime_command run;     /* the request's args are appended */
  char *env[RUNTIME_ENV_MAX + 1]; /* "KEY=VALUE", before the request's own */
  size_t n_env;
  char *mounts[RUNTIME_MOUNTS_MAX]; /* host paths, bound read-only at the same path */
  size_t n_mounts;
  /* Defaults this runtime needs above the server's (0: the server's), each
   * capped by the server's and the tenant's maxima; limits_why says why. */
  int64_t limits[LIMITS_N];
  char *limits_why;
  char *self_test_code;   /* run at start through the whole run path */
  char *self_test_stdout; /* what it must print, exactly, exiting 0 */
};

/* Reads and checks path. 0, or -1 with err (INVALID_ARGUMENT, the path
 * and the key in its message); m is then empty (nothing to free). */
int runtime_manifest_load(const char *path, struct runtime_manifest *m, struct sbx_error *err);
/* The same from a buffer; where names the source in messages. */
int runtime_manifest_parse(const char *text, size_t len, const char *where,
                           struct runtime_manifest *m, struct sbx_error *err);
void runtime_manifest_free(struct runtime_manifest *m);

/* Whether s is a runtime, language or alias name. */
bool runtime_name_ok(const char *s);

#endif
