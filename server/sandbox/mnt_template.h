/* mnt_template.h: the template mount namespace every run starts from. */
#ifndef SANDBOX_MNT_TEMPLATE_H
#define SANDBOX_MNT_TEMPLATE_H

#include "rootfs.h"
#include "sandbox_error.h"

/* Builds the shared, read-only root (rootfs_template_plan) in a mount
 * namespace of its own and returns an fd that keeps it (O_CLOEXEC), or -1.
 * A forked helper does the mounting and is killed once the fd is open. */
int mnt_template_create(const struct rootfs *fs, struct sandbox_error *err);

#endif
