/* rootfs.c: plans the sandbox's filesystem.
 *
 * The root of every run is a small tmpfs built from bind mounts of the host's
 * interpreter directories (read-only, nosuid, nodev), a synthesized /etc, a
 * fresh /proc, a minimal /dev, a size-limited /tmp and the workspace. Nothing
 * is copied per run. Runs with privileges: the paths here come from the
 * engine's configuration and the spec, which the caller validated; extra
 * mount targets are checked again here. */
#include "rootfs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "cleanup.h"
#include "etc.h"
#include "pylib.h"

static int mkdir_p(const char *path, mode_t mode, struct sandbox_error *err) {
  char buf[4096];
  if ((size_t)snprintf(buf, sizeof buf, "%s", path) >= sizeof buf)
    return sandbox_error_set(err, ENAMETOOLONG, "mkdir %s", path);
  for (char *p = buf + 1; *p != '\0'; p++) {
    if (*p != '/')
      continue;
    *p = '\0';
    if (mkdir(buf, mode) < 0 && errno != EEXIST)
      return sandbox_error_set(err, errno, "mkdir %s", buf);
    *p = '/';
  }
  if (mkdir(buf, mode) < 0 && errno != EEXIST)
    return sandbox_error_set(err, errno, "mkdir %s", buf);
  return 0;
}

/* Reads the host's top level: /usr is bound; /bin, /sbin, /lib* are bound
 * when they are directories and recreated when they are merged-/usr links. */
static int read_host_layout(struct rootfs *fs, struct sandbox_error *err) {
  static const char *const names[] = {"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    char path[64];
    snprintf(path, sizeof path, "/%s", names[i]);
    struct stat st;
    if (lstat(path, &st) < 0)
      continue;
    if (fs->n_top >= ROOTFS_MAX_TOP)
      break;
    typeof(fs->top[0]) *t = &fs->top[fs->n_top];
    snprintf(t->name, sizeof t->name, "%s", names[i]);
    if (S_ISLNK(st.st_mode)) {
      ssize_t n = readlink(path, t->target, sizeof t->target - 1);
      if (n <= 0)
        return sandbox_error_set(err, errno, "readlink %s", path);
      t->target[n] = '\0';
      t->is_link = true;
    } else if (S_ISDIR(st.st_mode)) {
      t->is_link = false;
    } else {
      continue;
    }
    fs->n_top++;
  }
  if (fs->n_top == 0 || strcmp(fs->top[0].name, "usr") != 0 || fs->top[0].is_link)
    return sandbox_error_set(err, ENOENT, "the host has no /usr directory");
  return 0;
}

int rootfs_init(struct rootfs *fs, const char *state_dir, uid_t uid_base, gid_t gid_base,
                unsigned slots, struct sandbox_error *err) {
  memset(fs, 0, sizeof *fs);
  if (state_dir[0] != '/')
    return sandbox_error_set(err, EINVAL, "state directory %s is not absolute", state_dir);
  if (mkdir_p(state_dir, 0755, err) < 0)
    return -1;
  if ((size_t)snprintf(fs->root, sizeof fs->root, "%s/root", state_dir) >= sizeof fs->root ||
      (size_t)snprintf(fs->etc, sizeof fs->etc, "%s/etc.%d", state_dir, (int)getpid()) >=
          sizeof fs->etc ||
      (size_t)snprintf(fs->users, sizeof fs->users, "%s/users.%d", state_dir, (int)getpid()) >=
          sizeof fs->users ||
      (size_t)snprintf(fs->lib, sizeof fs->lib, "%s/lib.%d", state_dir, (int)getpid()) >=
          sizeof fs->lib)
    return sandbox_error_set(err, ENAMETOOLONG, "state directory %s", state_dir);
  bool made_root = mkdir(fs->root, 0755) == 0;
  if (!made_root && errno != EEXIST)
    return sandbox_error_set(err, errno, "mkdir %s", fs->root);
  etc_remove_stale(state_dir);
  if (etc_write(fs->etc, fs->users, uid_base, gid_base, slots, err) == 0 &&
      pylib_write(fs->lib, err) == 0 && read_host_layout(fs, err) == 0)
    return 0;
  /* A failed start (a full disk, say) leaves nothing behind. */
  rootfs_destroy(fs);
  if (made_root)
    rmdir(fs->root);
  return -1;
}

void rootfs_destroy(const struct rootfs *fs) {
  etc_remove(fs->etc, fs->users);
  etc_remove(fs->lib, "");
}

static int plan_grow(struct rootfs_plan *plan) {
  if (plan->n_ops == plan->cap_ops) {
    size_t cap = plan->cap_ops ? plan->cap_ops * 2 : 64;
    struct child_op *ops = realloc(plan->ops, cap * sizeof *ops);
    if (ops == NULL)
      return -1;
    plan->ops = ops;
    plan->cap_ops = cap;
  }
  return 0;
}

/* Formats and keeps a string owned by the plan; NULL on failure. */
__attribute__((format(printf, 2, 3))) static const char *plan_str(struct rootfs_plan *plan,
                                                                  const char *fmt, ...) {
  if (plan->n_strings == plan->cap_strings) {
    size_t cap = plan->cap_strings ? plan->cap_strings * 2 : 64;
    char **s = realloc(plan->strings, cap * sizeof *s);
    if (s == NULL)
      return NULL;
    plan->strings = s;
    plan->cap_strings = cap;
  }
  va_list ap;
  va_start(ap, fmt);
  char *str = NULL;
  int n = vasprintf(&str, fmt, ap);
  va_end(ap);
  if (n < 0)
    return NULL;
  plan->strings[plan->n_strings++] = str;
  return str;
}

static int plan_add(struct rootfs_plan *plan, struct child_op op) {
  if (op.path == NULL || plan_grow(plan) < 0)
    return -1;
  plan->ops[plan->n_ops++] = op;
  return 0;
}

#define RO_FLAGS (MS_RDONLY | MS_NOSUID | MS_NODEV)

int rootfs_check_mount_target(const char *t, struct sandbox_error *err) {
  static const char *const reserved[] = {"/usr",   "/bin",       "/sbin", "/lib",  "/lib32",
                                         "/lib64", "/libx32",    "/etc",  "/proc", "/dev",
                                         "/tmp",   "/workspace", "/run"};
  size_t len = strlen(t);
  if (t[0] != '/' || len < 2 || len > 255 || t[len - 1] == '/' || strstr(t, "//") != NULL ||
      strstr(t, "/./") != NULL || strstr(t, "/../") != NULL ||
      (len >= 2 && strcmp(t + len - 2, "/.") == 0) || (len >= 3 && strcmp(t + len - 3, "/..") == 0))
    return sandbox_error_set(err, EINVAL, "mount target '%s' is not a normalized absolute path", t);
  for (const char *c = t; *c != '\0'; c++)
    if ((unsigned char)*c < 0x20 || *c == 0x7f)
      return sandbox_error_set(err, EINVAL, "mount target has a control character");
  /* Under /usr/local/ (read-only from the host): only over a directory that
   * exists there, such as the interpreter's site directory
   * /usr/local/lib/python3.11/dist-packages, which is on sys.path even for
   * python3 -I. Nothing is created under the host's /usr. */
  if (strncmp(t, "/usr/local/", 11) == 0) {
    struct stat st;
    if (lstat(t, &st) < 0 || !S_ISDIR(st.st_mode))
      return sandbox_error_set(err, EINVAL, "mount target '%s' is not an existing directory", t);
    return 0;
  }
  for (size_t i = 0; i < sizeof reserved / sizeof reserved[0]; i++) {
    size_t rl = strlen(reserved[i]);
    if (strncmp(t, reserved[i], rl) == 0 && (t[rl] == '\0' || t[rl] == '/'))
      return sandbox_error_set(err, EINVAL, "mount target '%s' is a system directory", t);
  }
  return 0;
}

/* Paths in a plan: pre + an absolute path inside the sandbox. pre is the
 * host directory where the root is built (fs->root), or "" for the per-run
 * operations of a template run, which happen inside the new root. */
#define AT(rel) plan_str(plan, "%s%s", pre, rel)

/* The root's tmpfs and the host's top level: binds of the interpreter
 * directories, merged-/usr links recreated as links. */
static int plan_root_and_host_dirs(const struct rootfs *fs, struct rootfs_plan *plan) {
  const char *pre = fs->root;
  int rc = 0;
  rc |= plan_add(plan, (struct child_op){.kind = CHILD_OP_MOUNT,
                                         .source = "tmpfs",
                                         .path = fs->root,
                                         .fstype = "tmpfs",
                                         .flags = MS_NOSUID | MS_NODEV,
                                         .data = "size=1m,nr_inodes=4096,mode=0755"});
  for (size_t i = 0; i < fs->n_top; i++) {
    const char *rel = plan_str(plan, "/%s", fs->top[i].name);
    if (rel == NULL)
      rc = -1;
    else if (fs->top[i].is_link)
      rc |= plan_add(plan, (struct child_op){.kind = CHILD_OP_SYMLINK,
                                             .source = fs->top[i].target,
                                             .path = AT(rel)});
    else {
      rc |=
          plan_add(plan, (struct child_op){.kind = CHILD_OP_MKDIR, .path = AT(rel), .mode = 0755});
      rc |= plan_add(plan,
                     (struct child_op){
                         .kind = CHILD_OP_BIND, .source = rel, .path = AT(rel), .flags = RO_FLAGS});
    }
  }
  return rc;
}

/* /etc: the synthesized one. */
static int plan_etc(const struct rootfs *fs, struct rootfs_plan *plan, bool network) {
  const char *pre = fs->root;
  int rc = 0;
  rc |= plan_add(plan, (struct child_op){.kind = CHILD_OP_MKDIR, .path = AT("/etc"), .mode = 0755});
  rc |= plan_add(
      plan, (struct child_op){
                .kind = CHILD_OP_BIND, .source = fs->etc, .path = AT("/etc"), .flags = RO_FLAGS});
  if (network) {
    /* CA certificates for the installer's TLS, which it speaks end to end
     * through the egress proxy. No resolv.conf: the proxy resolves names. */
    if (access("/etc/ssl", R_OK) == 0)
      rc |= plan_add(plan, (struct child_op){.kind = CHILD_OP_BIND,
                                             .source = "/etc/ssl",
                                             .path = AT("/etc/ssl"),
                                             .flags = RO_FLAGS});
  }
  return rc;
}

/* /dev's five harmless character devices and the stdio links. */
static int plan_dev_nodes(const struct rootfs *fs, struct rootfs_plan *plan) {
  const char *pre = fs->root;
  int rc = 0;
  static const struct {
    const char *name;
    unsigned minor;
  } devs[] = {{"/dev/null", 3},
              {"/dev/zero", 5},
              {"/dev/full", 7},
              {"/dev/random", 8},
              {"/dev/urandom", 9}};
  for (size_t i = 0; i < sizeof devs / sizeof devs[0]; i++)
    rc |= plan_add(plan, (struct child_op){.kind = CHILD_OP_MKNOD,
                                           .path = AT(devs[i].name),
                                           .mode = S_IFCHR | 0666,
                                           .dev = makedev(1, devs[i].minor)});
  static const struct {
    const char *name, *target;
  } links[] = {{"/dev/fd", "/proc/self/fd"},
               {"/dev/stdin", "/proc/self/fd/0"},
               {"/dev/stdout", "/proc/self/fd/1"},
               {"/dev/stderr", "/proc/self/fd/2"}};
  for (size_t i = 0; i < sizeof links / sizeof links[0]; i++)
    rc |= plan_add(plan, (struct child_op){.kind = CHILD_OP_SYMLINK,
                                           .source = links[i].target,
                                           .path = AT(links[i].name)});
  return rc;
}

/* A read-only /dev: a small tmpfs with the nodes, the links and the mount
 * points for /dev/shm and /dev/pts. */
static int plan_dev(const struct rootfs *fs, struct rootfs_plan *plan) {
  const char *pre = fs->root;
  int rc = 0;
  rc |= plan_add(plan, (struct child_op){.kind = CHILD_OP_MKDIR, .path = AT("/dev"), .mode = 0755});
  rc |= plan_add(plan, (struct child_op){.kind = CHILD_OP_MOUNT,
                                         .source = "tmpfs",
                                         .path = AT("/dev"),
                                         .fstype = "tmpfs",
                                         .flags = MS_NOSUID | MS_NOEXEC,
                                         .data = "size=64k,nr_inodes=64,mode=0755"});
  rc |= plan_dev_nodes(fs, plan);
  rc |= plan_add(plan,
                 (struct child_op){.kind = CHILD_OP_MKDIR, .path = AT("/dev/shm"), .mode = 01777});
  /* Pseudo-terminals come from a devpts instance of the run's own (mounted
   * per run); /dev/ptmx is its multiplexer. */
  rc |= plan_add(plan,
                 (struct child_op){.kind = CHILD_OP_MKDIR, .path = AT("/dev/pts"), .mode = 0755});
  rc |= plan_add(
      plan,
      (struct child_op){.kind = CHILD_OP_SYMLINK, .source = "pts/ptmx", .path = AT("/dev/ptmx")});
  rc |= plan_add(plan, (struct child_op){.kind = CHILD_OP_REMOUNT,
                                         .path = AT("/dev"),
                                         .flags = MS_RDONLY | MS_NOSUID | MS_NOEXEC});
  return rc;
}

/* What every run shares: a tiny read-only tmpfs root with read-only binds of
 * the host's interpreter directories, the synthesized /etc, mount points,
 * and a read-only /dev with five harmless character devices and the stdio
 * links. Built per run without a template, once into the template with.
 * Every step is planned even after one failed; the result is nonzero then. */
static int plan_shared(const struct rootfs *fs, struct rootfs_plan *plan, bool network) {
  const char *pre = fs->root;
  int rc = 0;
  rc |= plan_root_and_host_dirs(fs, plan);
  rc |= plan_etc(fs, plan, network);
  rc |= plan_add(plan, (struct child_op){.kind = CHILD_OP_MKDIR, .path = AT("/run"), .mode = 0755});
  rc |= plan_add(
      plan, (struct child_op){.kind = CHILD_OP_MKDIR, .path = AT(SANDBOX_LIB_DIR), .mode = 0755});
  rc |= plan_add(plan, (struct child_op){.kind = CHILD_OP_BIND,
                                         .source = fs->lib,
                                         .path = AT(SANDBOX_LIB_DIR),
                                         .flags = RO_FLAGS});
  rc |=
      plan_add(plan, (struct child_op){.kind = CHILD_OP_MKDIR, .path = AT("/proc"), .mode = 0555});
  rc |= plan_dev(fs, plan);
  rc |=
      plan_add(plan, (struct child_op){.kind = CHILD_OP_MKDIR, .path = AT("/tmp"), .mode = 01777});
  rc |= plan_add(plan,
                 (struct child_op){.kind = CHILD_OP_MKDIR, .path = AT("/workspace"), .mode = 0755});
  return rc;
}

/* What is fresh in every run: /proc for its PID namespace, /tmp and
 * /dev/shm (size-limited, charged to the run's memory cgroup), the
 * workspace read-write. Binds from the host are CHILD_OP_ATTACH in a
 * template run (cloned before the child leaves the host's namespace). */
static int plan_per_run(const struct rootfs *fs, const char *pre, bool template, bool proc_ro_binds,
                        unsigned slot, const struct sandbox_spec *spec,
                        const struct sandbox_limits *limits, struct rootfs_plan *plan) {
  int rc = 0;
  rc |= plan_add(plan, (struct child_op){.kind = CHILD_OP_MOUNT,
                                         .source = "proc",
                                         .path = AT("/proc"),
                                         .fstype = "proc",
                                         .flags = MS_NOSUID | MS_NODEV | MS_NOEXEC});
  /* Writes there need root; the binds are defence in depth against a kernel
   * bug, kept to the two that change the whole host. */
  static const char *const proc_ro[] = {"/proc/sys", "/proc/sysrq-trigger"};
  for (size_t i = 0; proc_ro_binds && i < sizeof proc_ro / sizeof proc_ro[0]; i++) {
    if (access(proc_ro[i], F_OK) < 0)
      continue;
    const char *path = AT(proc_ro[i]);
    rc |= plan_add(plan, (struct child_op){.kind = CHILD_OP_BIND,
                                           .source = path,
                                           .path = path,
                                           .flags = RO_FLAGS | MS_NOEXEC});
  }
  const char *tmpfs_data =
      plan_str(plan, "size=%" PRIu64 ",nr_inodes=65536,mode=1777", limits->tmp_bytes);
  rc |= plan_add(plan, (struct child_op){.kind = CHILD_OP_MOUNT,
                                         .source = "tmpfs",
                                         .path = AT("/dev/shm"),
                                         .fstype = "tmpfs",
                                         .flags = MS_NOSUID | MS_NODEV,
                                         .data = tmpfs_data});
  rc |= plan_add(plan, (struct child_op){.kind = CHILD_OP_MOUNT,
                                         .source = "tmpfs",
                                         .path = AT("/tmp"),
                                         .fstype = "tmpfs",
                                         .flags = MS_NOSUID | MS_NODEV,
                                         .data = tmpfs_data});
  /* A devpts of the run's own: it sees no terminal of the host or of
   * another run, and holds at most ROOTFS_MAX_PTYS_STR. */
  rc |= plan_add(plan, (struct child_op){
                           .kind = CHILD_OP_MOUNT,
                           .source = "devpts",
                           .path = AT("/dev/pts"),
                           .fstype = "devpts",
                           .flags = MS_NOSUID | MS_NOEXEC,
                           .data = "newinstance,ptmxmode=0666,mode=0620,max=" ROOTFS_MAX_PTYS_STR});
  enum child_op_kind bind = template ? CHILD_OP_ATTACH : CHILD_OP_BIND;
  rc |= plan_add(plan, (struct child_op){.kind = bind,
                                         .source = spec->workspace_dir,
                                         .path = AT("/workspace"),
                                         .flags = MS_NOSUID | MS_NODEV});
  /* The slot's own user databases: "sandbox" is this run's uid, whatever
   * slot it runs in (getpwnam, chown by name). */
  static const char *const dbs[] = {"passwd", "group"};
  for (size_t i = 0; i < 2; i++)
    rc |= plan_add(plan,
                   (struct child_op){.kind = bind,
                                     .source = plan_str(plan, "%s/%s.%u", fs->users, dbs[i], slot),
                                     .path = plan_str(plan, "%s/etc/%s", pre, dbs[i]),
                                     .flags = RO_FLAGS});
  return rc;
}

static int plan_mkdir_p(const char *pre, struct rootfs_plan *plan, const char *target) {
  /* target was checked: absolute and normalized. */
  const char *p = target;
  while ((p = strchr(p + 1, '/')) != NULL) {
    int n = (int)(p - target);
    if (plan_add(plan, (struct child_op){.kind = CHILD_OP_MKDIR,
                                         .path = plan_str(plan, "%s%.*s", pre, n, target),
                                         .mode = 0755}) < 0)
      return -1;
  }
  return plan_add(plan,
                  (struct child_op){.kind = CHILD_OP_MKDIR, .path = AT(target), .mode = 0755});
}

/* Extra read-only binds. A template run takes only targets that exist in
 * the template (directories under /usr/local/, as the requirements'
 * site directory): its root is read-only and shared, nothing is created. */
static int plan_mounts(const char *pre, bool template, const struct sandbox_spec *spec,
                       struct rootfs_plan *plan, struct sandbox_error *err) {
  int rc = 0;
  for (size_t i = 0; i < spec->n_mounts; i++) {
    const struct sandbox_mount *m = &spec->mounts[i];
    if (rootfs_check_mount_target(m->target, err) < 0)
      return -1;
    if (m->source == NULL || m->source[0] != '/')
      return sandbox_error_set(err, EINVAL, "mount source for %s is not absolute", m->target);
    struct stat st;
    if (stat(m->source, &st) < 0)
      return sandbox_error_set(err, errno, "mount source %s", m->source);
    bool under_usr = strncmp(m->target, "/usr/", 5) == 0; /* exists: checked above */
    if (S_ISDIR(st.st_mode) && under_usr) {
      /* mount point already there in the read-only /usr */
    } else if (template) {
      return sandbox_error_set(err, EINVAL, "mount target %s needs the root built per run",
                               m->target);
    } else if (S_ISDIR(st.st_mode)) {
      rc |= plan_mkdir_p(pre, plan, m->target);
    } else if (under_usr) {
      return sandbox_error_set(err, EINVAL, "mount source for %s must be a directory", m->target);
    } else {
      char parent[256];
      snprintf(parent, sizeof parent, "%.*s", (int)(strrchr(m->target, '/') - m->target),
               m->target);
      if (parent[0] != '\0')
        rc |= plan_mkdir_p(pre, plan, parent);
      rc |= plan_add(
          plan, (struct child_op){.kind = CHILD_OP_MKFILE, .path = AT(m->target), .mode = 0644});
    }
    rc |= plan_add(plan, (struct child_op){.kind = template ? CHILD_OP_ATTACH : CHILD_OP_BIND,
                                           .source = m->source,
                                           .path = AT(m->target),
                                           .flags = RO_FLAGS});
  }
  if (rc != 0)
    return sandbox_error_set(err, ENOMEM, "mount plan");
  return 0;
}

bool rootfs_template_fits(const struct sandbox_spec *spec) {
  if (spec->network)
    return false; /* the installer: the CA certificates bound in */
  /* Targets under /usr/ are existing directories in any root (checked,
   * with the source, when the plan is built); others may need creating. */
  for (size_t i = 0; i < spec->n_mounts; i++)
    if (spec->mounts[i].target == NULL || strncmp(spec->mounts[i].target, "/usr/", 5) != 0)
      return false;
  return true;
}

int rootfs_template_plan(const struct rootfs *fs, struct rootfs_plan *plan,
                         struct sandbox_error *err) {
  memset(plan, 0, sizeof *plan);
  if (plan_shared(fs, plan, false) != 0) {
    rootfs_plan_free(plan);
    return sandbox_error_set(err, ENOMEM, "mount plan");
  }
  return 0;
}

int rootfs_plan_build(const struct rootfs *fs, unsigned slot, const struct sandbox_spec *spec,
                      const struct sandbox_limits *limits, bool template, struct rootfs_plan *plan,
                      struct sandbox_error *err) {
  memset(plan, 0, sizeof *plan);
  const char *pre = template ? "" : fs->root;
  if ((!template && plan_shared(fs, plan, spec->network) != 0) ||
      plan_per_run(fs, pre, template, true, slot, spec, limits, plan) != 0) {
    rootfs_plan_free(plan);
    return sandbox_error_set(err, ENOMEM, "mount plan");
  }
  if (plan_mounts(pre, template, spec, plan, err) < 0) {
    rootfs_plan_free(plan);
    return -1;
  }
  return 0;
}

int rootfs_zygote_plan(const struct rootfs *fs, unsigned slot, const struct sandbox_spec *spec,
                       const struct sandbox_limits *limits, struct rootfs_plan *plan,
                       struct sandbox_error *err) {
  memset(plan, 0, sizeof *plan);
  if (plan_per_run(fs, "", true, false, slot, spec, limits, plan) != 0) {
    rootfs_plan_free(plan);
    return sandbox_error_set(err, ENOMEM, "mount plan");
  }
  if (plan_mounts("", true, spec, plan, err) < 0) {
    rootfs_plan_free(plan);
    return -1;
  }
  return 0;
}

void rootfs_plan_free(struct rootfs_plan *plan) {
  for (size_t i = 0; i < plan->n_strings; i++)
    free(plan->strings[i]);
  free(plan->strings);
  free(plan->ops);
  memset(plan, 0, sizeof *plan);
}

void rootfs_describe_op(const struct rootfs_plan *plan, size_t i, char *buf, size_t size) {
  if (i >= plan->n_ops) {
    snprintf(buf, size, "mount step %zu", i);
    return;
  }
  static const char *const verbs[] = {"mkdir", "symlink", "mount",  "bind mount",
                                      "mknod", "remount", "create", "attach"};
  const struct child_op *op = &plan->ops[i];
  snprintf(buf, size, "%s %s%s%s", verbs[op->kind], op->source ? op->source : "",
           op->source ? " -> " : "", op->path);
}
