/* envstore.c: see envstore.h. Runs as root on worker threads. The table's
 * mutex is never held across I/O on the environments themselves (copies,
 * removals, syncs): only renames that take an environment out of the store
 * happen under it, so a run never sees a half-evicted one. Trees from the
 * sandbox are read only through fds, never following a symlink. */
#include "envstore.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"
#include "safefs.h"
#include "sandbox/sandbox.h"

#define COPY_MAX_DEPTH 64
#define COPY_MAX_ENTRIES (1u << 20) /* per directory */
#define META_MAX (256u << 10)
#define BLOCK 4096u

static bool is_key(const char *name) {
  size_t n = 0;
  for (; name[n] != '\0'; n++)
    if (!((name[n] >= '0' && name[n] <= '9') || (name[n] >= 'a' && name[n] <= 'f')))
      return false;
  return n == REQUIREMENT_KEY_HEX;
}

static struct envstore_env *find(struct envstore *s, const char *key) {
  for (struct envstore_env *e = s->envs; e != NULL; e = e->next)
    if (strcmp(e->key, key) == 0)
      return e;
  return NULL;
}

static void unlink_env(struct envstore *s, struct envstore_env *env) {
  for (struct envstore_env **pp = &s->envs; *pp != NULL; pp = &(*pp)->next)
    if (*pp == env) {
      *pp = env->next;
      return;
    }
}

static void free_env(struct envstore_env *env) {
  free(env->failure);
  free(env);
}

static void remove_tree_logged(struct envstore *s, const char *name) {
  if (sandbox_remove_tree(s->dir_fd, name) < 0 && errno != ENOENT)
    log_line("env_remove_failed", "dir=%s/%s error=\"%s\"", s->dir, name, strerror(errno));
}

/* Takes idle environments out of the store, least recently used first,
 * until it is within its cap; removes their trees after unlocking. */
static void evict(struct envstore *s) {
  for (;;) {
    char trash[16][REQUIREMENT_KEY_HEX + 48];
    size_t n = 0;
    pthread_mutex_lock(&s->mu);
    while (s->total_bytes > s->cap_bytes && n < 16) {
      struct envstore_env *lru = NULL;
      for (struct envstore_env *e = s->envs; e != NULL; e = e->next)
        if (e->state == ENVSTORE_READY && e->refs == 0 &&
            (lru == NULL || e->last_used < lru->last_used))
          lru = e;
      if (lru == NULL)
        break; /* everything left is in use: over the cap until released */
      snprintf(trash[n], sizeof(trash[n]), "trash-%s-%" PRIu64, lru->key, ++s->seq);
      if (renameat(s->dir_fd, lru->key, s->dir_fd, trash[n]) < 0) {
        log_line("env_evict_rename_failed", "key=%s error=\"%s\"", lru->key, strerror(errno));
        snprintf(trash[n], sizeof(trash[n]), "%s", lru->key);
      }
      n++;
      s->total_bytes -= lru->bytes;
      s->n_ready--;
      atomic_fetch_add(&s->evictions_total, 1);
      log_line("env_evict", "key=%s bytes=%" PRIu64 " store_bytes=%" PRIu64 " cap=%" PRIu64,
               lru->key, lru->bytes, s->total_bytes, s->cap_bytes);
      unlink_env(s, lru);
      free_env(lru);
    }
    pthread_mutex_unlock(&s->mu);
    for (size_t i = 0; i < n; i++)
      remove_tree_logged(s, trash[i]);
    if (n < 16)
      return;
  }
}

/* Reads <key>/meta; returns its bytes= value, or -1 when the entry is not a
 * complete environment. */
static int64_t read_meta(int dir_fd, const char *key, struct stat *meta_st) {
  char path[REQUIREMENT_KEY_HEX + 16];
  snprintf(path, sizeof(path), "%s/" ENVSTORE_META, key);
  int fd = openat(dir_fd, path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return -1;
  char buf[512];
  ssize_t n =
      fstat(fd, meta_st) == 0 && S_ISREG(meta_st->st_mode) ? read(fd, buf, sizeof(buf) - 1) : -1;
  close(fd);
  if (n <= 0)
    return -1;
  buf[n] = '\0';
  char want[REQUIREMENT_KEY_HEX + 8];
  snprintf(want, sizeof(want), "key=%s\n", key);
  if (strncmp(buf, want, strlen(want)) != 0)
    return -1;
  const char *b = strstr(buf, "\nbytes=");
  if (b == NULL)
    return -1;
  char *end;
  long long bytes = strtoll(b + 7, &end, 10);
  if (end == b + 7 || *end != '\n' || bytes < 0)
    return -1;
  snprintf(path, sizeof(path), "%s/" ENVSTORE_SITE, key);
  struct stat st;
  if (fstatat(dir_fd, path, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(st.st_mode))
    return -1;
  return bytes;
}

/* One entry of the store's directory at start: a complete environment is
 * loaded (recency from meta's mtime); what a crash left (tmp-, trash-,
 * incomplete keys) is removed and counted in *removed. -1 only for ENOMEM. */
static int load_entry(struct envstore *s, const char *name, size_t *removed) {
  if (strncmp(name, "tmp-", 4) == 0 || strncmp(name, "trash-", 6) == 0) {
    remove_tree_logged(s, name); /* a crashed build or an unfinished eviction */
    (*removed)++;
    return 0;
  }
  if (!is_key(name)) {
    log_line("env_store_unknown_entry", "dir=%s name=\"%.80s\" left alone", s->dir, name);
    return 0;
  }
  struct stat meta_st;
  int64_t bytes = read_meta(s->dir_fd, name, &meta_st);
  if (bytes < 0) {
    remove_tree_logged(s, name);
    (*removed)++;
    return 0;
  }
  struct envstore_env *e = calloc(1, sizeof(*e));
  if (e == NULL)
    return -1;
  snprintf(e->key, sizeof(e->key), "%s", name);
  e->state = ENVSTORE_READY;
  e->bytes = (uint64_t)bytes;
  e->last_used =
      (uint64_t)meta_st.st_mtim.tv_sec * 1000u + (uint64_t)meta_st.st_mtim.tv_nsec / 1000000u;
  e->next = s->envs;
  s->envs = e;
  s->total_bytes += e->bytes;
  s->n_ready++;
  return 0;
}

static int load_entries(struct envstore *s, size_t *removed, struct sbx_error *err) {
  char **names;
  size_t n;
  bool truncated;
  if (safefs_read_names(s->dir_fd, COPY_MAX_ENTRIES, &names, &n, &truncated, err) < 0)
    return sbx_error_wrap(err, "%s", s->dir);
  int rv = 0;
  for (size_t i = 0; i < n && rv == 0; i++)
    if (load_entry(s, names[i], removed) < 0)
      rv = sbx_error_set(err, SBX_INTERNAL, ENOMEM, "requirements store");
  safefs_free_names(names, n);
  return rv;
}

int envstore_open(struct envstore *s, const char *dir, uint64_t cap_bytes, struct sbx_error *err) {
  memset(s, 0, sizeof(*s));
  s->dir_fd = -1;
  if (snprintf(s->dir, sizeof(s->dir), "%s", dir) >= (int)sizeof(s->dir))
    return sbx_error_set(err, SBX_INTERNAL, 0, "%s: path too long", dir);
  s->cap_bytes = cap_bytes;
  if (mkdir(dir, 0711) < 0 && errno != EEXIST)
    return sbx_error_set(err, SBX_INTERNAL, errno, "mkdir %s", dir);
  s->dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (s->dir_fd < 0)
    return sbx_error_set(err, SBX_INTERNAL, errno, "open %s", dir);
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->changed, NULL);

  size_t removed = 0;
  if (load_entries(s, &removed, err) < 0)
    return -1;
  log_line("env_store",
           "dir=%s environments=%zu bytes=%" PRIu64 " cap=%" PRIu64 " leftovers_removed=%zu", dir,
           s->n_ready, s->total_bytes, s->cap_bytes, removed);
  evict(s);
  return 0;
}

void envstore_close(struct envstore *s) {
  if (s->dir_fd < 0)
    return;
  while (s->envs != NULL) {
    struct envstore_env *e = s->envs;
    s->envs = e->next;
    free_env(e);
  }
  close(s->dir_fd);
  s->dir_fd = -1;
  pthread_cond_destroy(&s->changed);
  pthread_mutex_destroy(&s->mu);
}

/* Persists recency across restarts: meta's mtime. */
static void touch(struct envstore *s, const char *key) {
  char path[REQUIREMENT_KEY_HEX + 16];
  snprintf(path, sizeof(path), "%s/" ENVSTORE_META, key);
  (void)utimensat(s->dir_fd, path, NULL, AT_SYMLINK_NOFOLLOW);
}

enum envstore_outcome envstore_acquire(struct envstore *s, const char *key,
                                       struct envstore_env **env, struct sbx_error *err) {
  pthread_mutex_lock(&s->mu);
  struct envstore_env *e = find(s, key);
  if (e == NULL && s->max_building > 0 && s->n_building >= s->max_building) {
    unsigned n = s->n_building;
    pthread_mutex_unlock(&s->mu);
    sbx_error_set(err, SBX_RESOURCE_EXHAUSTED, 0,
                  "requirements: %u new environments are being built, the most at once "
                  "(--max-concurrent-builds); try again when one is done",
                  n);
    return ENVSTORE_ERROR;
  }
  if (e == NULL) {
    e = calloc(1, sizeof(*e));
    if (e == NULL) {
      pthread_mutex_unlock(&s->mu);
      sbx_error_set(err, SBX_INTERNAL, ENOMEM, "requirements store");
      return ENVSTORE_ERROR;
    }
    snprintf(e->key, sizeof(e->key), "%s", key);
    e->state = ENVSTORE_BUILDING;
    e->refs = 1;
    e->next = s->envs;
    s->envs = e;
    s->n_building++;
    atomic_fetch_add(&s->builds_total, 1);
    pthread_mutex_unlock(&s->mu);
    *env = e;
    return ENVSTORE_BUILD;
  }
  e->refs++;
  /* Another worker builds it on its own slot: it needs nothing from us. */
  while (e->state == ENVSTORE_BUILDING)
    pthread_cond_wait(&s->changed, &s->mu);
  if (e->state == ENVSTORE_READY) {
    e->last_used = sbx_now_unix_ms();
    pthread_mutex_unlock(&s->mu);
    touch(s, key);
    *env = e;
    return ENVSTORE_USE;
  }
  sbx_error_set(err, e->failure_code, 0, "%s",
                e->failure != NULL ? e->failure : "the environment's build failed");
  if (--e->refs == 0) {
    unlink_env(s, e);
    free_env(e);
  }
  pthread_mutex_unlock(&s->mu);
  return ENVSTORE_ERROR;
}

void envstore_fail(struct envstore *s, struct envstore_env *env, const struct sbx_error *why) {
  pthread_mutex_lock(&s->mu);
  if (env->state == ENVSTORE_BUILDING)
    s->n_building--;
  env->state = ENVSTORE_FAILED;
  env->failure_code = why->code;
  env->failure = strdup(why->msg);
  atomic_fetch_add(&s->build_failures_total, 1);
  pthread_cond_broadcast(&s->changed);
  /* Gone from the table once the waiters have read the failure: the next
   * request for the set tries again. */
  if (--env->refs == 0) {
    unlink_env(s, env);
    free_env(env);
  }
  pthread_mutex_unlock(&s->mu);
}

struct copy_state {
  uint64_t bytes, limit;
  size_t files, skipped;
};

static uint64_t blocks(uint64_t size) {
  return (size + BLOCK - 1) / BLOCK * BLOCK + (size == 0 ? BLOCK : 0);
}

static int copy_file(int src_dir, int dst_dir, const char *name, const struct stat *st,
                     struct copy_state *cs, struct sbx_error *err) {
  int in = openat(src_dir, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (in < 0)
    return sbx_error_set(err, SBX_INTERNAL, errno, "open %s", name);
  struct stat fst;
  if (fstat(in, &fst) < 0 || !S_ISREG(fst.st_mode) || fst.st_ino != st->st_ino ||
      fst.st_dev != st->st_dev) {
    close(in);
    return sbx_error_set(err, SBX_INTERNAL, 0, "%s changed while being copied", name);
  }
  mode_t mode = (fst.st_mode & 0111) != 0 ? 0755 : 0644;
  int out = openat(dst_dir, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
  if (out < 0) {
    int e = errno;
    close(in);
    return sbx_error_set(err, SBX_INTERNAL, e, "create %s", name);
  }
  int rv = fchmod(out, mode);
  off_t off = 0;
  while (rv == 0 && off < fst.st_size) {
    ssize_t k = sendfile(out, in, &off, (size_t)(fst.st_size - off));
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0) {
      rv = sbx_error_set(err, SBX_INTERNAL, k < 0 ? errno : EIO, "copy %s", name);
      break;
    }
  }
  /* The .pyc files pip compiled check their source's mtime: keep it, or
   * every run would recompile (and could not cache) on the read-only mount. */
  struct timespec times[2] = {fst.st_atim, fst.st_mtim};
  if (rv == 0 && futimens(out, times) < 0)
    rv = sbx_error_set(err, SBX_INTERNAL, errno, "set times of %s", name);
  close(in);
  if (close(out) < 0 && rv == 0)
    rv = sbx_error_set(err, SBX_INTERNAL, errno, "write %s", name);
  cs->bytes += blocks((uint64_t)fst.st_size);
  cs->files++;
  return rv;
}

static int copy_tree(int src_dir, int dst_dir, unsigned depth, struct copy_state *cs,
                     struct sbx_error *err) {
  if (depth > COPY_MAX_DEPTH)
    return sbx_error_set(err, SBX_INTERNAL, 0, "directories nested deeper than %d levels",
                         COPY_MAX_DEPTH);
  char **names;
  size_t n;
  bool truncated;
  if (safefs_read_names(src_dir, COPY_MAX_ENTRIES, &names, &n, &truncated, err) < 0)
    return -1;
  int rv = truncated ? sbx_error_set(err, SBX_INTERNAL, 0, "a directory with too many entries") : 0;
  for (size_t i = 0; i < n && rv == 0; i++) {
    struct stat st;
    if (fstatat(src_dir, names[i], &st, AT_SYMLINK_NOFOLLOW) < 0) {
      rv = sbx_error_set(err, SBX_INTERNAL, errno, "stat %s", names[i]);
      break;
    }
    if (S_ISREG(st.st_mode)) {
      rv = copy_file(src_dir, dst_dir, names[i], &st, cs, err);
    } else if (S_ISDIR(st.st_mode)) {
      cs->bytes += BLOCK;
      if (mkdirat(dst_dir, names[i], 0755) < 0) {
        rv = sbx_error_set(err, SBX_INTERNAL, errno, "mkdir %s", names[i]);
        break;
      }
      int flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
      int sub_src = openat(src_dir, names[i], flags);
      int sub_dst = openat(dst_dir, names[i], flags);
      if (sub_src < 0 || sub_dst < 0)
        rv = sbx_error_set(err, SBX_INTERNAL, errno, "open %s", names[i]);
      else
        rv = copy_tree(sub_src, sub_dst, depth + 1, cs, err);
      if (sub_src >= 0)
        close(sub_src);
      if (sub_dst >= 0)
        close(sub_dst);
    } else {
      cs->skipped++; /* symlinks, FIFOs, sockets, devices: never followed */
    }
    if (rv == 0 && cs->bytes > cs->limit)
      rv = sbx_error_set(err, SBX_INTERNAL, 0,
                         "the environment is larger than the store's cap of %" PRIu64
                         " bytes (--requirements-store-bytes)",
                         cs->limit);
  }
  safefs_free_names(names, n);
  return rv;
}

static int write_meta(int dir_fd, const struct envstore_env *env, const struct copy_state *cs,
                      const char *material, struct sbx_error *err) {
  int fd =
      openat(dir_fd, ENVSTORE_META, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0)
    return sbx_error_set(err, SBX_INTERNAL, errno, "create meta");
  FILE *f = fdopen(fd, "w");
  if (f == NULL) {
    close(fd);
    return sbx_error_set(err, SBX_INTERNAL, errno, "meta");
  }
  fprintf(f, "key=%s\nbytes=%" PRIu64 "\nfiles=%zu\nskipped=%zu\ncreated=%lld\n%s", env->key,
          cs->bytes, cs->files, cs->skipped, (long long)time(NULL), material);
  if (fclose(f) != 0)
    return sbx_error_set(err, SBX_INTERNAL, errno, "write meta");
  return 0;
}

int envstore_commit(struct envstore *s, struct envstore_env *env, int src_fd, const char *material,
                    struct sbx_error *err) {
  char tmp[REQUIREMENT_KEY_HEX + 48];
  pthread_mutex_lock(&s->mu);
  snprintf(tmp, sizeof(tmp), "tmp-%s-%" PRIu64, env->key, ++s->seq);
  pthread_mutex_unlock(&s->mu);

  struct copy_state cs = {.limit = s->cap_bytes};
  int rv = 0, tmp_fd = -1, site_fd = -1;
  if (mkdirat(s->dir_fd, tmp, 0755) < 0)
    rv = sbx_error_set(err, SBX_INTERNAL, errno, "mkdir %s/%s", s->dir, tmp);
  if (rv == 0 &&
      (tmp_fd = openat(s->dir_fd, tmp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
    rv = sbx_error_set(err, SBX_INTERNAL, errno, "open %s/%s", s->dir, tmp);
  if (rv == 0 && (mkdirat(tmp_fd, ENVSTORE_SITE, 0755) < 0 ||
                  (site_fd = openat(tmp_fd, ENVSTORE_SITE,
                                    O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0))
    rv = sbx_error_set(err, SBX_INTERNAL, errno, "mkdir site");
  if (rv == 0)
    rv = copy_tree(src_fd, site_fd, 0, &cs, err);
  if (rv == 0)
    rv = write_meta(tmp_fd, env, &cs, material, err);
  /* Everything on disk before the name says "complete". */
  if (rv == 0 && syncfs(tmp_fd) < 0)
    rv = sbx_error_set(err, SBX_INTERNAL, errno, "syncfs");
  if (rv == 0 && renameat2(s->dir_fd, tmp, s->dir_fd, env->key, RENAME_NOREPLACE) < 0)
    rv = sbx_error_set(err, SBX_INTERNAL, errno, "rename %s to %s", tmp, env->key);
  if (rv == 0)
    (void)fsync(s->dir_fd);
  if (site_fd >= 0)
    close(site_fd);
  if (tmp_fd >= 0)
    close(tmp_fd);
  if (rv < 0) {
    remove_tree_logged(s, tmp);
    envstore_fail(s, env, err);
    return -1;
  }
  if (cs.skipped > 0)
    log_line("env_skipped_entries", "key=%s skipped=%zu (symlinks or special files)", env->key,
             cs.skipped);

  pthread_mutex_lock(&s->mu);
  s->n_building--;
  env->state = ENVSTORE_READY;
  env->bytes = cs.bytes;
  env->last_used = sbx_now_unix_ms();
  s->total_bytes += cs.bytes;
  s->n_ready++;
  pthread_cond_broadcast(&s->changed);
  pthread_mutex_unlock(&s->mu);
  evict(s);
  return 0;
}

void envstore_release(struct envstore *s, struct envstore_env *env) {
  pthread_mutex_lock(&s->mu);
  env->refs--;
  env->last_used = sbx_now_unix_ms();
  bool over = s->total_bytes > s->cap_bytes;
  pthread_mutex_unlock(&s->mu);
  if (over)
    evict(s);
}

void envstore_site_path(const struct envstore *s, const struct envstore_env *env, char *buf,
                        size_t len) {
  snprintf(buf, len, "%s/%s/" ENVSTORE_SITE, s->dir, env->key);
}

void envstore_counts(struct envstore *s, size_t *ready, uint64_t *bytes) {
  pthread_mutex_lock(&s->mu);
  *ready = s->n_ready;
  *bytes = s->total_bytes;
  pthread_mutex_unlock(&s->mu);
}
