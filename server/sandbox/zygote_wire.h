/* zygote_wire.h: what the engine (zygote.c) and a zygote (zygote_main.c)
 * say to each other on the zygote's control socket (SOCK_SEQPACKET).
 *
 * Start: the zygote sends ZYGOTE_MSG_USERNS once it has made its user
 * namespace; the engine writes the maps and answers ZYGOTE_MSG_MAPPED with
 * a memfd (struct zygote_config, then the runs' seccomp program, the
 * zygote's own, then the preload list); the zygote answers ZYGOTE_MSG_READY, or ZYGOTE_MSG_FAILED
 * and a message, once its modules are imported.
 *
 * A run: ZYGOTE_MSG_RUN with a sealed memfd (the packed run below) and the
 * run's fds: stdin, stdout, stderr, the report socket and one detached mount
 * tree per CHILD_OP_ATTACH op, in their order. The zygote answers nothing on
 * the control socket: the run's first process reports on the report socket
 * (child.h's messages, CHILD_REPORT_HELLO first, with its credentials).
 *
 * The engine is the only writer and is trusted, but every offset and count
 * is checked on the way in: a packed run that does not add up is refused. */
#ifndef SANDBOX_ZYGOTE_WIRE_H
#define SANDBOX_ZYGOTE_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/resource.h>

#include "child.h"

enum zygote_msg {
  ZYGOTE_MSG_USERNS = 'U',
  ZYGOTE_MSG_MAPPED = 'M',
  ZYGOTE_MSG_READY = 'R',
  ZYGOTE_MSG_FAILED = 'F',
  ZYGOTE_MSG_RUN = 'r',
};

/* The run's fds after the memfd, in this order; trees follow. */
enum { ZYGOTE_FD_MEMFD, ZYGOTE_FD_STDIN, ZYGOTE_FD_STDOUT, ZYGOTE_FD_STDERR, ZYGOTE_FD_REPORT };
#define ZYGOTE_RUN_FDS 5
#define ZYGOTE_MAX_FDS (ZYGOTE_RUN_FDS + CHILD_MAX_ATTACH)
#define ZYGOTE_MAX_PACKED (4u << 20) /* argv, environment and plan of one run */
#define ZYGOTE_MAX_ERROR 4096        /* a failed start's message */

struct zygote_config {
  uint32_t magic;
  uint32_t uid, gid;         /* the slot's: the user namespace maps them to themselves */
  uint32_t cap_last_cap;     /* the engine's reading of /proc/sys/kernel/cap_last_cap */
  uint32_t n_seccomp;        /* struct sock_filter entries after this struct: the runs' filter */
  uint32_t n_zygote_seccomp; /* then these: the zygote's own (SECCOMP_PROFILE_ZYGOTE) */
  uint32_t preload_len;      /* then the preload list: module names, comma-separated */
};
#define ZYGOTE_MAGIC 0x5a79676fu /* "Zygo" */

/* A run, unpacked: child_args' fields that a run in a zygote uses, pointing
 * into the memfd's mapping (ops, argv, envp, cwd, hostname, rlimits). */
struct zygote_run {
  struct child_op *ops;
  size_t n_ops;
  const char **argv;
  const char **envp;
  const char *cwd;
  const char *hostname;
  struct {
    int resource;
    struct rlimit limit;
  } rlimits[CHILD_MAX_RLIMITS];
  size_t n_rlimits;
  size_t n_trees; /* CHILD_OP_ATTACH ops */
};

/* Engine side: packs a's ops, argv, envp, cwd, hostname and rlimits into a
 * new sealed memfd. Returns the fd, or -1 with errno. */
int zygote_wire_pack(const struct child_args *a);
/* Zygote side, in the program's process (its own copy of the zygote):
 * maps the memfd and fills run, whose pointers live as long as the
 * mapping (the process's lifetime); ops and the pointer arrays are
 * allocated. 0, or -1 with errno (EBADMSG: it does not add up). */
int zygote_wire_unpack(int memfd, struct zygote_run *run);

#endif
