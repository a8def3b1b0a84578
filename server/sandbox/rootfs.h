/* rootfs.h: the sandbox's filesystem, planned in the parent.
 *
 * At engine start: the synthesized /etc is written under the state directory
 * and the host's top-level layout (/usr, and /bin, /lib... as directories or
 * merged-/usr symlinks) is read once. Per run: the list of mount operations
 * the child carries out, all strings built before the clone. */
#ifndef SANDBOX_ROOTFS_H
#define SANDBOX_ROOTFS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "child.h"
#include "sandbox.h"

#define ROOTFS_MAX_TOP 8
/* Pseudo-terminals a run may open at once (its devpts's max=). */
#define ROOTFS_MAX_PTYS_STR "64"

struct rootfs {
  char root[4096];  /* <state>/root: mount point of each run's root tmpfs */
  char etc[4096];   /* <state>/etc.<pid>: the synthesized /etc, bound read-only */
  char users[4096]; /* <state>/users.<pid>: passwd.N and group.N per slot */
  char lib[4096];   /* <state>/lib.<pid>: Python helpers (pylib.c), at SANDBOX_LIB_DIR */
  struct {
    char name[16];
    bool is_link;
    char target[256];
  } top[ROOTFS_MAX_TOP];
  size_t n_top;
};

/* A run's operations and the strings they point to. */
struct rootfs_plan {
  struct child_op *ops;
  size_t n_ops, cap_ops;
  char **strings;
  size_t n_strings, cap_strings;
};

int rootfs_init(struct rootfs *fs, const char *state_dir, uid_t uid_base, gid_t gid_base,
                unsigned slots, struct sandbox_error *err);
/* Removes this engine's synthesized /etc and user databases. */
void rootfs_destroy(const struct rootfs *fs);
/* A run's operations. template: the run enters a copy of the template
 * namespace, and the plan holds only what is fresh per run (/proc, /tmp,
 * /dev/shm, the workspace, extra mounts), with paths inside the sandbox.
 * Otherwise the plan builds the whole root under fs->root. */
int rootfs_plan_build(const struct rootfs *fs, unsigned slot, const struct sandbox_spec *spec,
                      const struct sandbox_limits *limits, bool template, struct rootfs_plan *plan,
                      struct sandbox_error *err);

/* The template mount namespace: built once at engine start by a helper
 * (child_template_main), which runs this plan in a namespace of its own,
 * pivots into the new root, detaches the old one and makes the root
 * read-only. The engine keeps an fd to the namespace; each run's child
 * joins it and unshares a private copy. */
int rootfs_template_plan(const struct rootfs *fs, struct rootfs_plan *plan,
                         struct sandbox_error *err);
/* Whether a run can use the template: no network profile (the installer
 * binds the host's CA certificates) and extra mounts only on
 * directories that exist in the template (under /usr/). */
bool rootfs_template_fits(const struct sandbox_spec *spec);
void rootfs_plan_free(struct rootfs_plan *plan);
/* A zygote's own root (zygote.c): a template run's plan for spec, but a
 * /proc with nothing bound over it. A zygote's runs mount a /proc of their
 * own from inside its user namespace, which the kernel allows only where
 * one proc is fully visible already; each run binds /proc/sys read-only
 * over its own, as any run. */
int rootfs_zygote_plan(const struct rootfs *fs, unsigned slot, const struct sandbox_spec *spec,
                       const struct sandbox_limits *limits, struct rootfs_plan *plan,
                       struct sandbox_error *err);

/* Checks a path inside the sandbox for an extra mount: absolute, normalized
 * (no "." or ".." parts, no "//"), and not on or under a system directory. */
int rootfs_check_mount_target(const char *target, struct sandbox_error *err);

/* Human description of plan operation i, for setup errors. */
void rootfs_describe_op(const struct rootfs_plan *plan, size_t i, char *buf, size_t size);

#endif
