/* zygote.c: the engine's side of zygotes (zygote.h, docs/ZYGOTE.md).
 *
 * A slot's zygote is started like a run, from the slot's thread
 * (spawn_clone, child.c with args.zygote): the same template root, the
 * slot's network namespace, PID/IPC/UTS/cgroup namespaces of its own. It
 * is moved into the zygotes' cgroup before it runs, then makes its user
 * namespace; this side writes the maps (the slot's uid and gid, nothing
 * else) and sends its configuration: the seccomp program every run loads,
 * the modules to import. A run is one message with the run's fds; the
 * run's first process says HELLO with its credentials on the run's report
 * socket, and this side moves it into the slot's cgroups before letting
 * it go. From there the run is supervised like any other (engine.c). */
#include "zygote.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/mount.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cleanup.h"
#include "io.h"
#include "zygote_memory.h"
#include "zygote_wire.h"

/* A zygote has this long to import its modules (a cold matplotlib takes
 * about a second here; a busy host, several). */
#define ZYGOTE_START_TIMEOUT_MS 60000
/* and a run's first process this long to say HELLO. */
#define ZYGOTE_HELLO_TIMEOUT_MS 10000
#define ZYGOTE_TMP_BYTES (64ULL << 20)
/* A failed start is not tried again sooner than this (sandbox_spawn.h). */
#define ZYGOTE_RETRY_MS 10000

extern const unsigned char sandbox_zygote_blob[];
extern const unsigned char sandbox_zygote_blob_end[];

static const char *const zygote_argv[] = {"sandbox-zygote", NULL};

static uint64_t elapsed_ms(const struct timespec *since) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (uint64_t)(now.tv_sec - since->tv_sec) * 1000u +
         (uint64_t)((now.tv_nsec - since->tv_nsec) / 1000000);
}

int zygote_engine_init(struct sandbox_engine *e, struct sandbox_error *err) {
  e->zygote_fd = -1;
  for (unsigned i = 0; i < e->config.slots; i++) {
    e->slots[i].zygote.pidfd = e->slots[i].zygote.ctl = -1;
    e->slots[i].zygote.pid = 0;
    zygote_shown_init(&e->slots[i].zygote.shown);
  }
  if (!e->config.zygote.enabled)
    return 0;
  if (e->cgroups.backend->adopt == NULL)
    return sandbox_error_set(err, EINVAL, "zygotes need a cgroup backend (v2 or v1), not %s",
                             e->cgroups.backend->name);
  snprintf(e->zygote_preload, sizeof e->zygote_preload, "%s",
           e->config.zygote.preload != NULL ? e->config.zygote.preload : "");
  e->config.zygote.preload = e->zygote_preload;
  if (e->config.zygote.max_forks == 0)
    e->config.zygote.max_forks = SANDBOX_DEFAULT_ZYGOTE_FORKS;
  if (e->config.zygote.max_age_ms == 0)
    e->config.zygote.max_age_ms = SANDBOX_DEFAULT_ZYGOTE_AGE_MS;
  snprintf(e->zygote_home, sizeof e->zygote_home, "%s/zygote-home", e->state_dir);
  if (mkdir(e->zygote_home, 0555) < 0 && errno != EEXIST)
    return sandbox_error_set(err, errno, "mkdir %s", e->zygote_home);
  e->zygote_fd = spawn_image_memfd("sandbox-zygote", sandbox_zygote_blob,
                                   (size_t)(sandbox_zygote_blob_end - sandbox_zygote_blob), err);
  return e->zygote_fd < 0 ? -1 : 0;
}

/* Ends the zygote (its runs' namespaces are below its own: they go too)
 * and reaps it, no longer shown to stats readers by then. */
static void zygote_stop(struct sandbox_engine *e, unsigned slot) {
  struct zygote_slot *z = &e->slots[slot].zygote;
  zygote_shown_clear(&z->shown);
  if (e->cgroups.backend != NULL && e->cgroups.backend->host_zygote != NULL)
    e->cgroups.backend->host_zygote(&e->cgroups, slot, 0, NULL);
  if (z->ctl >= 0)
    close(z->ctl);
  if (z->pidfd >= 0) {
    syscall(SYS_pidfd_send_signal, z->pidfd, SIGKILL, NULL, 0);
    spawn_wait(z->pidfd, NULL);
    close(z->pidfd);
  }
  free(z->mounts_key);
  z->mounts_key = NULL;
  z->ctl = z->pidfd = -1;
  atomic_store(&z->pid, 0);
  z->forks = 0;
}

void zygote_engine_release(struct sandbox_engine *e) {
  for (unsigned i = 0; e->slots != NULL && i < e->config.slots; i++) {
    zygote_stop(e, i);
    free(e->slots[i].zygote.failed_key);
    e->slots[i].zygote.failed_key = NULL;
    zygote_shown_destroy(&e->slots[i].zygote.shown);
  }
  if (e->zygote_fd >= 0)
    close(e->zygote_fd);
  e->zygote_fd = -1;
  if (e->zygote_home[0] != '\0')
    rmdir(e->zygote_home);
}

int zygote_check_spec(const struct sandbox_engine *e, const struct sandbox_spec *spec,
                      struct sandbox_error *err) {
  if (e->zygote_fd < 0)
    return sandbox_error_set(err, EINVAL, "this engine has no zygotes (zygote.enabled)");
  if (spec->network)
    return sandbox_error_set(err, EINVAL, "a zygote never runs with the network profile");
  if (!rootfs_template_fits(spec))
    return sandbox_error_set(err, EINVAL, "a zygote's runs take extra mounts under /usr/ only");
  const char *const *a = spec->argv;
  size_t i = 1;
  if (strcmp(a[0], "/usr/bin/python3") != 0)
    return sandbox_error_set(err, EINVAL, "a zygote runs /usr/bin/python3 only, not %.64s", a[0]);
  while (a[i] != NULL && strcmp(a[i], "-u") == 0)
    i++;
  /* sandboxd_cell's kernel (an interpreter session's), exactly. */
  if (a[i] != NULL && strcmp(a[i], "-c") == 0 && a[i + 1] != NULL &&
      strcmp(a[i + 1], SANDBOX_CELL_LOADER) == 0 && a[i + 2] != NULL &&
      strcmp(a[i + 2], "kernel") == 0 && a[i + 3] == NULL)
    return 0;
  if (a[i] == NULL || a[i][0] != '/')
    return sandbox_error_set(err, EINVAL,
                             "a zygote runs \"python3 [-u] SCRIPT [ARGS...]\" with an absolute "
                             "SCRIPT, or sandboxd_cell's kernel; other options are not supported");
  return 0;
}

/* "source=target;..." of the extra mounts: a zygote serves runs with the
 * same ones (a requirements environment bound over site-packages). */
static char *zygote_mounts_key(const struct sandbox_spec *spec) {
  size_t len = 1;
  for (size_t i = 0; i < spec->n_mounts; i++)
    len += strlen(spec->mounts[i].source) + strlen(spec->mounts[i].target) + 2;
  char *key = malloc(len);
  if (key == NULL)
    return NULL;
  size_t at = 0;
  key[0] = '\0';
  for (size_t i = 0; i < spec->n_mounts; i++)
    at += (size_t)snprintf(key + at, len - at, "%s=%s;", spec->mounts[i].source,
                           spec->mounts[i].target);
  return key;
}

/* One message on the control socket, waiting at most timeout_ms and not
 * past the zygote's death. Returns its length, 0 at EOF or death, -1 with
 * errno (ETIMEDOUT). */
static ssize_t ctl_recv(const struct zygote_slot *z, char *buf, size_t size, int timeout_ms) {
  struct pollfd p[2] = {{.fd = z->ctl, .events = POLLIN}, {.fd = z->pidfd, .events = POLLIN}};
  for (;;) {
    int rc = poll(p, 2, timeout_ms);
    if (rc < 0 && errno == EINTR)
      continue;
    if (rc < 0)
      return -1;
    if (rc == 0) {
      errno = ETIMEDOUT;
      return -1;
    }
    if (p[0].revents) {
      ssize_t n = recv(z->ctl, buf, size, MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EINTR))
        continue;
      return n;
    }
    return 0; /* died without a word */
  }
}

/* One message, kind, with n_fds descriptors, in one SOCK_SEQPACKET
 * message (the zygote reads the kind and its fds with one recvmsg). */
_Static_assert(ZYGOTE_MAX_FDS <= SBX_SEND_FDS_MAX, "a run's fds must fit one message");
static int send_fds(int sock, char kind, const int *fds, size_t n_fds) {
  return sbx_send_with_fds(sock, &kind, 1, fds, n_fds, -1);
}

static int write_file(pid_t pid, const char *file, const char *text) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, file);
  cleanup_close int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0)
    return -1;
  ssize_t n = write(fd, text, strlen(text));
  return n == (ssize_t)strlen(text) ? 0 : -1;
}

/* The maps (the slot's uid and gid, to themselves), then the
 * configuration: the seccomp program and the preload list. */
static int configure(struct sandbox_engine *e, unsigned slot, struct zygote_slot *z,
                     struct sandbox_error *err) {
  pid_t pid = atomic_load(&z->pid);
  uid_t uid = e->config.uid_base + slot;
  gid_t gid = e->config.gid_base + slot;
  char map[64];
  snprintf(map, sizeof map, "%u %u 1\n", (unsigned)uid, (unsigned)uid);
  if (write_file(pid, "uid_map", map) < 0)
    return sandbox_error_set(err, errno, "write the zygote's uid_map");
  if (write_file(pid, "setgroups", "deny") < 0)
    return sandbox_error_set(err, errno, "write the zygote's setgroups");
  snprintf(map, sizeof map, "%u %u 1\n", (unsigned)gid, (unsigned)gid);
  if (write_file(pid, "gid_map", map) < 0)
    return sandbox_error_set(err, errno, "write the zygote's gid_map");
  const struct seccomp_policy *sp = &e->seccomp, *zp = &e->seccomp_zygote;
  struct zygote_config cfg = {.magic = ZYGOTE_MAGIC,
                              .uid = uid,
                              .gid = gid,
                              .cap_last_cap = (uint32_t)e->cap_last_cap,
                              .n_seccomp = sp->prog.len,
                              .n_zygote_seccomp = zp->prog.len,
                              .preload_len = (uint32_t)strlen(e->zygote_preload)};
  cleanup_close int fd = memfd_create("sandbox-zygote-config", MFD_CLOEXEC);
  if (fd < 0)
    return sandbox_error_set(err, errno, "memfd");
  size_t insns = sizeof(struct sock_filter) * sp->prog.len;
  size_t zinsns = sizeof(struct sock_filter) * zp->prog.len;
  if (write(fd, &cfg, sizeof cfg) != (ssize_t)sizeof cfg ||
      write(fd, sp->prog.filter, insns) != (ssize_t)insns ||
      write(fd, zp->prog.filter, zinsns) != (ssize_t)zinsns ||
      write(fd, e->zygote_preload, cfg.preload_len) != (ssize_t)cfg.preload_len)
    return sandbox_error_set(err, errno, "write the zygote's configuration");
  int fds[2] = {fd, e->init_fd};
  if (send_fds(z->ctl, ZYGOTE_MSG_MAPPED, fds, 2) < 0)
    return sandbox_error_set(err, errno, "send the zygote its configuration");
  return 0;
}

/* Waits for msg; a FAILED message's text or a setup error goes to err. */
static int expect(struct zygote_slot *z, char msg, int report_fd, int timeout_ms,
                  const struct rootfs_plan *plan, struct sandbox_error *err) {
  char buf[ZYGOTE_MAX_ERROR];
  ssize_t n = ctl_recv(z, buf, sizeof buf - 1, timeout_ms);
  if (n > 0 && buf[0] == msg)
    return 0;
  if (n > 0 && buf[0] == ZYGOTE_MSG_FAILED) {
    buf[n] = '\0';
    return sandbox_error_set(err, 0, "the zygote failed to start: %s", buf + 1);
  }
  if (n < 0 && errno == ETIMEDOUT)
    return sandbox_error_set(err, ETIMEDOUT, "the zygote did not start within %d s",
                             timeout_ms / 1000);
  struct child_report r;
  if (report_fd >= 0 && read(report_fd, &r, sizeof r) == (ssize_t)sizeof r &&
      r.kind == CHILD_REPORT_SETUP_ERROR)
    return spawn_setup_error(plan, r.stage, r.errnum, "the zygote's", err);
  return sandbox_error_set(err, 0, "the zygote ended during its start");
}

/* fds of a start: the control socket pair, /dev/null, report and sync
 * pipes. [0] ours, [1] the child's (sync: [0] the child's). */
struct start_fds {
  int ctl[2], null, report[2], sync[2];
};

static void start_fds_close(struct start_fds *f) {
  int *all[] = {&f->ctl[0],    &f->ctl[1],  &f->null,   &f->report[0],
                &f->report[1], &f->sync[0], &f->sync[1]};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    if (*all[i] >= 0) {
      close(*all[i]);
      *all[i] = -1;
    }
}

static int start_fds_open(struct start_fds *f, struct sandbox_error *err) {
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, f->ctl) < 0 ||
      (f->null = open("/dev/null", O_RDWR | O_CLOEXEC)) < 0 ||
      pipe2(f->report, O_CLOEXEC | O_DIRECT) < 0 || pipe2(f->sync, O_CLOEXEC) < 0)
    return sandbox_error_set(err, errno, "the zygote's sockets and pipes");
  fcntl(f->report[0], F_SETFL, O_NONBLOCK);
  return 0;
}

/* The zygote's process as a child: its plan and environment, stdin the
 * control socket, stdout and stderr /dev/null, sandbox-zygote as init. */
static void start_child_args(const struct sandbox_engine *e, unsigned slot,
                             const struct rootfs_plan *plan, const char **env,
                             const struct start_fds *f, struct child_args *a) {
  *a = (struct child_args){.ops = plan->ops,
                           .n_ops = plan->n_ops,
                           .root = e->rootfs.root,
                           .mntns_fd = e->mntns_fd,
                           .cwd = "/",
                           .hostname = "sandbox",
                           .argv = zygote_argv,
                           .envp = env,
                           .cap_last_cap = e->cap_last_cap,
                           .stdin_fd = f->ctl[1],
                           .stdout_fd = f->null,
                           .stderr_fd = f->null,
                           .report_fd = f->report[1],
                           .sync_fd = f->sync[0],
                           .netns_fd = e->slots[slot].netns_fd,
                           .init_fd = e->zygote_fd,
                           .zygote = true};
  a->rlimits[0].resource = RLIMIT_CORE;
  a->n_rlimits = 1;
}

/* Clones the zygote into z (pid, pidfd, control socket), moves it into the
 * zygotes' cgroup and lets it go on. The caller stops it on failure. */
static int start_spawn(struct sandbox_engine *e, unsigned slot, struct zygote_slot *z,
                       struct child_args *a, struct start_fds *f, struct sandbox_error *err) {
  int pidfd = -1;
  pid_t pid = spawn_clone(e, slot, a, -1, &pidfd, err);
  if (pid < 0)
    return -1;
  z->pidfd = pidfd;
  atomic_store(&z->pid, pid);
  z->ctl = steal_fd(&f->ctl[0]);
  /* The child's ends are its own now. */
  close(steal_fd(&f->ctl[1]));
  close(steal_fd(&f->report[1]));
  close(steal_fd(&f->sync[0]));
  if (cgroup_zygotes_adopt(&e->cgroups, pid, err) < 0)
    return sandbox_error_wrap(err, "place the zygote in its cgroup");
  ssize_t w = write(f->sync[1], "g", 1);
  (void)w;
  close(steal_fd(&f->sync[1]));
  return 0;
}

/* From the zygote's user namespace to its READY: the maps and the
 * configuration, then the slot's cgroup hosts it. */
static int start_handshake(struct sandbox_engine *e, unsigned slot, struct zygote_slot *z,
                           int report, const struct rootfs_plan *plan, struct sandbox_error *err) {
  if (expect(z, ZYGOTE_MSG_USERNS, report, ZYGOTE_START_TIMEOUT_MS, plan, err) < 0 ||
      configure(e, slot, z, err) < 0 ||
      expect(z, ZYGOTE_MSG_READY, -1, ZYGOTE_START_TIMEOUT_MS, plan, err) < 0)
    return -1;
  if (e->cgroups.backend->host_zygote != NULL &&
      e->cgroups.backend->host_zygote(&e->cgroups, slot, atomic_load(&z->pid), err) < 0)
    return -1;
  return 0;
}

/* What a start holds until it ends, either way: the zygote's plan, its
 * environment, the fds of the start. */
struct start_state {
  struct rootfs_plan plan;
  const char **env;
  struct start_fds f;
};

static void start_state_release(struct start_state *st) {
  start_fds_close(&st->f);
  free(st->env);
  rootfs_plan_free(&st->plan);
}

/* A zygote for spec's extra mounts in slot, from its clone to READY. */
static int start_steps(struct sandbox_engine *e, unsigned slot, const struct sandbox_spec *spec,
                       struct start_state *st, struct sandbox_error *err) {
  struct zygote_slot *z = &e->slots[slot].zygote;
  struct sandbox_spec zspec = {.argv = zygote_argv,
                               .workspace_dir = e->zygote_home,
                               .mounts = spec->mounts,
                               .n_mounts = spec->n_mounts};
  struct sandbox_limits limits = {.tmp_bytes = ZYGOTE_TMP_BYTES};
  sandbox_limits_fill_defaults(&limits);
  if (rootfs_zygote_plan(&e->rootfs, slot, &zspec, &limits, &st->plan, err) < 0)
    return -1;
  st->env = spawn_build_env(NULL, err);
  if (st->env == NULL || start_fds_open(&st->f, err) < 0)
    return -1;
  struct child_args a;
  start_child_args(e, slot, &st->plan, st->env, &st->f, &a);
  if (start_spawn(e, slot, z, &a, &st->f, err) < 0 ||
      start_handshake(e, slot, z, st->f.report[0], &st->plan, err) < 0)
    return -1;
  z->mounts_key = zygote_mounts_key(spec);
  if (z->mounts_key == NULL)
    return sandbox_error_set(err, ENOMEM, "zygote");
  clock_gettime(CLOCK_MONOTONIC, &z->started);
  z->forks = 0;
  zygote_shown_ready(&z->shown, atomic_load(&z->pid), spec->environment);
  return 0;
}

/* A start counted either way; a failed one leaves no zygote behind (it is
 * stopped before the start's fds close, while it still waits). */
static int zygote_start(struct sandbox_engine *e, unsigned slot, const struct sandbox_spec *spec,
                        struct sandbox_error *err) {
  __attribute__((cleanup(start_state_release))) struct start_state st = {
      .f = {{-1, -1}, -1, {-1, -1}, {-1, -1}}};
  if (start_steps(e, slot, spec, &st, err) < 0) {
    atomic_fetch_add(&e->zygote_counts.start_failures, 1);
    zygote_stop(e, slot);
    return -1;
  }
  atomic_fetch_add(&e->zygote_counts.starts, 1);
  return 0;
}

int zygote_ensure(struct sandbox_engine *e, unsigned slot, const struct sandbox_spec *spec,
                  struct sandbox_error *err) {
  struct zygote_slot *z = &e->slots[slot].zygote;
  if (atomic_load(&z->pid) != 0) {
    struct pollfd p = {.fd = z->pidfd, .events = POLLIN};
    cleanup_free char *key = zygote_mounts_key(spec);
    bool dead = poll(&p, 1, 0) > 0;
    bool due = z->forks >= e->config.zygote.max_forks ||
               elapsed_ms(&z->started) >= e->config.zygote.max_age_ms;
    bool other = key == NULL || strcmp(key, z->mounts_key) != 0;
    if (!dead && !due && !other)
      return 0;
    if (due || other)
      atomic_fetch_add(&e->zygote_counts.recycled, 1);
    zygote_stop(e, slot);
  }
  cleanup_free char *key = zygote_mounts_key(spec);
  if (key == NULL)
    return sandbox_error_set(err, ENOMEM, "zygote");
  if (z->failed_key != NULL && strcmp(z->failed_key, key) == 0 &&
      elapsed_ms(&z->failed_at) < ZYGOTE_RETRY_MS) {
    *err = z->failed;
    return sandbox_error_wrap(err, "slot %u (%llu ms ago; tried again %d s after)", slot,
                              (unsigned long long)elapsed_ms(&z->failed_at),
                              ZYGOTE_RETRY_MS / 1000);
  }
  free(z->failed_key);
  z->failed_key = NULL;
  if (zygote_start(e, slot, spec, err) < 0) {
    z->failed = *err;
    z->failed_key = steal_pointer(&key);
    clock_gettime(CLOCK_MONOTONIC, &z->failed_at);
    return sandbox_error_wrap(err, "slot %u", slot);
  }
  return 1;
}

int zygote_send_run(struct sandbox_engine *e, unsigned slot, const struct child_args *a,
                    int report_child, struct sandbox_error *err) {
  struct zygote_slot *z = &e->slots[slot].zygote;
  int fds[ZYGOTE_MAX_FDS];
  size_t n = 0;
  cleanup_close int memfd = zygote_wire_pack(a);
  if (memfd < 0)
    return sandbox_error_set(err, errno, "pack the run for the zygote");
  fds[n++] = memfd;
  fds[n++] = a->stdin_fd;
  fds[n++] = a->stdout_fd;
  fds[n++] = a->stderr_fd;
  fds[n++] = report_child;
  int ret = 0;
  /* The host directories of the run (workspace, user databases, extra
   * mounts), cloned here where their paths resolve. */
  for (size_t i = 0; i < a->n_ops && ret == 0; i++) {
    if (a->ops[i].kind != CHILD_OP_ATTACH)
      continue;
    if (n == ZYGOTE_MAX_FDS) {
      ret = sandbox_error_set(err, E2BIG, "too many mounts for a zygote's run");
      break;
    }
    int tree = (int)syscall(SYS_open_tree, AT_FDCWD, a->ops[i].source,
                            OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE);
    if (tree < 0)
      ret = sandbox_error_set(err, errno, "clone %s for the run", a->ops[i].source);
    else
      fds[n++] = tree;
  }
  if (ret == 0 && send_fds(z->ctl, ZYGOTE_MSG_RUN, fds, n) < 0) {
    ret = sandbox_error_set(err, errno, "hand the run to the zygote");
    zygote_stop(e, slot); /* the next run starts a fresh one */
  }
  /* The trees are clones of our own: the zygote has its copies now. */
  for (size_t i = ZYGOTE_RUN_FDS; i < n; i++)
    close(fds[i]);
  if (ret == 0) {
    z->forks++;
    zygote_shown_forked(&z->shown);
  }
  return ret;
}

pid_t zygote_take_run(struct sandbox_engine *e, unsigned slot, int report, int *pidfd,
                      struct child_report *setup, struct sandbox_error *err) {
  struct zygote_slot *z = &e->slots[slot].zygote;
  struct pollfd p[2] = {{.fd = report, .events = POLLIN}, {.fd = z->pidfd, .events = POLLIN}};
  memset(setup, 0, sizeof *setup);
  for (;;) {
    int rc = poll(p, 2, ZYGOTE_HELLO_TIMEOUT_MS);
    if (rc < 0 && errno == EINTR)
      continue;
    if (rc <= 0)
      return sandbox_error_set(err, rc == 0 ? ETIMEDOUT : errno,
                               "the zygote's fork did not report");
    if (p[0].revents)
      break;
    zygote_stop(e, slot);
    return sandbox_error_set(err, 0, "the zygote died before the run started");
  }
  struct child_report r = {0};
  char cbuf[CMSG_SPACE(sizeof(struct ucred))];
  struct iovec iov = {.iov_base = &r, .iov_len = sizeof r};
  struct msghdr mh = {
      .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf};
  ssize_t n = recvmsg(report, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  if (n != (ssize_t)sizeof r)
    return sandbox_error_set(err, n < 0 ? errno : EPROTO, "the zygote's fork did not report");
  if (r.kind == CHILD_REPORT_SETUP_ERROR) {
    *setup = r;
    return -1;
  }
  struct ucred cred = {0};
  for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c != NULL; c = CMSG_NXTHDR(&mh, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS)
      memcpy(&cred, CMSG_DATA(c), sizeof cred);
  if (r.kind != CHILD_REPORT_HELLO || cred.pid <= 0 || cred.uid != e->config.uid_base + slot)
    return sandbox_error_set(err, EPROTO, "the zygote's fork said something else than HELLO");
  cleanup_close int fd = (int)syscall(SYS_pidfd_open, cred.pid, 0);
  if (fd < 0)
    return sandbox_error_set(err, errno, "pidfd of the run");
  if (e->cgroups.backend->adopt(&e->cgroups, slot, cred.pid, err) < 0) {
    syscall(SYS_pidfd_send_signal, fd, SIGKILL, NULL, 0);
    return sandbox_error_wrap(err, "place the run in its cgroup");
  }
  if (write(report, "g", 1) != 1) {
    int en = errno;
    syscall(SYS_pidfd_send_signal, fd, SIGKILL, NULL, 0);
    return sandbox_error_set(err, en, "start the run");
  }
  atomic_fetch_add(&e->zygote_counts.forks, 1);
  *pidfd = steal_fd(&fd);
  return cred.pid;
}

int sandbox_zygote_warm(struct sandbox_engine *e, unsigned slot, struct sandbox_error *err) {
  if (slot >= e->config.slots)
    return sandbox_error_set(err, EINVAL, "slot %u out of range", slot);
  if (e->zygote_fd < 0)
    return sandbox_error_set(err, EINVAL, "this engine has no zygotes");
  struct sandbox_spec spec = {0};
  return zygote_ensure(e, slot, &spec, err);
}

void sandbox_zygote_stats(struct sandbox_engine *e, struct sandbox_zygote_stats *out) {
  memset(out, 0, sizeof *out);
  for (unsigned i = 0; i < e->config.slots; i++)
    if (atomic_load(&e->slots[i].zygote.pid) != 0)
      out->running++;
  out->have_memory = cgroup_zygotes_memory(&e->cgroups, &out->memory_bytes) == 0;
  out->starts = atomic_load(&e->zygote_counts.starts);
  out->start_failures = atomic_load(&e->zygote_counts.start_failures);
  out->forks = atomic_load(&e->zygote_counts.forks);
  out->recycled = atomic_load(&e->zygote_counts.recycled);
}
