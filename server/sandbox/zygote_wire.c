/* zygote_wire.c: a run's plan, argv and environment, packed by the engine
 * into a sealed memfd and unpacked by the zygote's fork (zygote_wire.h). */
#include "zygote_wire.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "buf.h"
#include "cleanup.h"
#include "io.h"

#define NO_STRING UINT32_MAX

struct wire_header {
  uint32_t magic;
  uint32_t n_ops, n_argv, n_env, n_rlimits;
  uint32_t cwd, hostname; /* string offsets */
  uint32_t strings_len;   /* the string area, after the arrays */
};

struct wire_op {
  uint32_t kind, mode;
  uint32_t source, path, fstype, data; /* string offsets or NO_STRING */
  uint64_t flags, dev;
};

struct wire_rlimit {
  int32_t resource, pad;
  uint64_t cur, max;
};

/* The buffer the engine packs into: once a put fails, the rest are
 * dropped and the pack fails. */
struct packer {
  struct sbx_buf b;
  bool failed;
};

static size_t put(struct packer *p, const void *data, size_t n) {
  size_t at = p->b.len;
  if (p->failed || sbx_buf_append(&p->b, data, n, ZYGOTE_MAX_PACKED) < 0) {
    p->failed = true;
    return 0;
  }
  return at;
}

static size_t count(const char *const *v) {
  size_t n = 0;
  while (v != NULL && v[n] != NULL)
    n++;
  return n;
}

/* Strings go into a second packer; offsets are relative to its start. */
static uint32_t put_string(struct packer *s, const char *str) {
  if (str == NULL)
    return NO_STRING;
  return (uint32_t)put(s, str, strlen(str) + 1);
}

/* The header, the arrays and the string area they point into, in p. */
static void pack_into(struct packer *p, struct packer *s, const struct child_args *a) {
  size_t n_argv = count(a->argv), n_env = count(a->envp);
  struct wire_header h = {.magic = ZYGOTE_MAGIC,
                          .n_ops = (uint32_t)a->n_ops,
                          .n_argv = (uint32_t)n_argv,
                          .n_env = (uint32_t)n_env,
                          .n_rlimits = (uint32_t)a->n_rlimits};
  h.cwd = put_string(s, a->cwd);
  h.hostname = put_string(s, a->hostname);
  put(p, &h, sizeof h);
  for (size_t i = 0; i < a->n_ops; i++) {
    const struct child_op *op = &a->ops[i];
    struct wire_op w = {.kind = op->kind,
                        .mode = op->mode,
                        .source = put_string(s, op->source),
                        .path = put_string(s, op->path),
                        .fstype = put_string(s, op->fstype),
                        .data = put_string(s, op->data),
                        .flags = op->flags,
                        .dev = op->dev};
    put(p, &w, sizeof w);
  }
  for (size_t i = 0; i < a->n_rlimits; i++) {
    struct wire_rlimit w = {.resource = a->rlimits[i].resource,
                            .cur = a->rlimits[i].limit.rlim_cur,
                            .max = a->rlimits[i].limit.rlim_max};
    put(p, &w, sizeof w);
  }
  for (size_t i = 0; i < n_argv + n_env; i++) {
    uint32_t off = put_string(s, i < n_argv ? a->argv[i] : a->envp[i - n_argv]);
    put(p, &off, sizeof off);
  }
  if (!p->failed && p->b.data != NULL) {
    ((struct wire_header *)(void *)p->b.data)->strings_len = (uint32_t)s->b.len;
    put(p, s->b.data, s->b.len);
  }
}

int zygote_wire_pack(const struct child_args *a) {
  struct packer p = {0}, s = {0};
  pack_into(&p, &s, a);
  sbx_buf_free(&s.b);
  if (p.failed || s.failed || a->n_ops > UINT32_MAX) {
    sbx_buf_free(&p.b);
    errno = E2BIG;
    return -1;
  }
  cleanup_close int fd = memfd_create("sandbox-zygote-run", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  int e = fd < 0 ? errno : 0;
  if (e == 0 &&
      (sbx_write_all(fd, p.b.data, p.b.len) < 0 ||
       fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0))
    e = errno;
  sbx_buf_free(&p.b);
  if (e != 0) {
    errno = e;
    return -1;
  }
  return steal_fd(&fd);
}

/* Checked pointers into the mapping. */
struct reader {
  const char *base;
  size_t len;
  const char *strings;
  size_t strings_len;
  bool bad;
};

static const void *take(struct reader *r, size_t *at, size_t n) {
  if (r->bad || n > r->len || *at > r->len - n) {
    r->bad = true;
    return NULL;
  }
  const void *p = r->base + *at;
  *at += n;
  return p;
}

/* A string offset: inside the area and NUL-terminated there. */
static const char *string_at(struct reader *r, uint32_t off, bool may_be_null) {
  if (off == NO_STRING && may_be_null)
    return NULL;
  if (r->bad || off >= r->strings_len ||
      memchr(r->strings + off, '\0', r->strings_len - off) == NULL) {
    r->bad = true;
    return NULL;
  }
  return r->strings + off;
}

/* Maps the memfd and checks the header and that the arrays and the string
 * area add up to its size; r then reads from just past the header (*at). */
static int map_checked(int memfd, struct reader *r, struct wire_header *h, size_t *at) {
  struct stat st;
  if (fstat(memfd, &st) < 0)
    return -1;
  if (st.st_size < (off_t)sizeof(struct wire_header) || st.st_size > (off_t)ZYGOTE_MAX_PACKED) {
    errno = EBADMSG;
    return -1;
  }
  size_t len = (size_t)st.st_size;
  const char *base = mmap(NULL, len, PROT_READ, MAP_PRIVATE, memfd, 0);
  if (base == MAP_FAILED)
    return -1;
  *r = (struct reader){.base = base, .len = len};
  *at = 0;
  memcpy(h, take(r, at, sizeof *h), sizeof *h);
  if (h->magic != ZYGOTE_MAGIC || h->n_ops > 4096 || h->n_rlimits > CHILD_MAX_RLIMITS ||
      h->n_argv == 0 || h->n_argv > (1u << 20) || h->n_env > (1u << 20) || h->strings_len > len) {
    errno = EBADMSG;
    return -1;
  }
  size_t arrays = h->n_ops * sizeof(struct wire_op) + h->n_rlimits * sizeof(struct wire_rlimit) +
                  (h->n_argv + h->n_env) * sizeof(uint32_t);
  if (*at + arrays + h->strings_len != len) {
    errno = EBADMSG;
    return -1;
  }
  r->strings = base + *at + arrays;
  r->strings_len = h->strings_len;
  return 0;
}

static void unpack_ops(struct reader *r, size_t *at, uint32_t n, struct zygote_run *run) {
  for (uint32_t i = 0; i < n; i++) {
    struct wire_op w;
    const void *p = take(r, at, sizeof w);
    if (p == NULL)
      break;
    memcpy(&w, p, sizeof w);
    if (w.kind > CHILD_OP_ATTACH) {
      r->bad = true;
      break;
    }
    run->ops[i] = (struct child_op){.kind = (enum child_op_kind)w.kind,
                                    .source = string_at(r, w.source, true),
                                    .path = string_at(r, w.path, false),
                                    .fstype = string_at(r, w.fstype, true),
                                    .data = string_at(r, w.data, true),
                                    .flags = (unsigned long)w.flags,
                                    .mode = (mode_t)w.mode,
                                    .dev = (dev_t)w.dev};
    if (w.kind == CHILD_OP_ATTACH)
      run->n_trees++;
  }
  run->n_ops = n;
}

static void unpack_rlimits(struct reader *r, size_t *at, uint32_t n, struct zygote_run *run) {
  for (uint32_t i = 0; i < n; i++) {
    struct wire_rlimit w;
    const void *p = take(r, at, sizeof w);
    if (p == NULL)
      break;
    memcpy(&w, p, sizeof w);
    run->rlimits[i].resource = w.resource;
    run->rlimits[i].limit.rlim_cur = w.cur;
    run->rlimits[i].limit.rlim_max = w.max;
  }
  run->n_rlimits = n;
}

/* argv's offsets, then the environment's. */
static void unpack_strings(struct reader *r, size_t *at, const struct wire_header *h,
                           struct zygote_run *run) {
  for (uint32_t i = 0; i < h->n_argv + h->n_env; i++) {
    uint32_t off;
    const void *p = take(r, at, sizeof off);
    if (p == NULL)
      break;
    memcpy(&off, p, sizeof off);
    if (i < h->n_argv)
      run->argv[i] = string_at(r, off, false);
    else
      run->envp[i - h->n_argv] = string_at(r, off, false);
  }
}

int zygote_wire_unpack(int memfd, struct zygote_run *run) {
  memset(run, 0, sizeof *run);
  struct reader r;
  struct wire_header h;
  size_t at;
  if (map_checked(memfd, &r, &h, &at) < 0)
    return -1;
  run->ops = calloc(h.n_ops + 1, sizeof *run->ops);
  run->argv = calloc(h.n_argv + 1, sizeof *run->argv);
  run->envp = calloc(h.n_env + 1, sizeof *run->envp);
  if (run->ops == NULL || run->argv == NULL || run->envp == NULL) {
    errno = ENOMEM;
    return -1;
  }
  run->cwd = string_at(&r, h.cwd, false);
  run->hostname = string_at(&r, h.hostname, false);
  unpack_ops(&r, &at, h.n_ops, run);
  unpack_rlimits(&r, &at, h.n_rlimits, run);
  unpack_strings(&r, &at, &h, run);
  if (r.bad || run->n_trees > CHILD_MAX_ATTACH) {
    errno = EBADMSG;
    return -1;
  }
  return 0;
}
