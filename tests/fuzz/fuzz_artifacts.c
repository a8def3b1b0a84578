/* fuzz_artifacts: libFuzzer harness over artifact collection, the server's
 * read of a tree the sandbox controls (server/artifacts.c, safefs.c). Each
 * input is a little program of filesystem operations that builds output/:
 * directories, files, symlinks (to a secret outside the tree, to /, to
 * themselves, to each other), FIFOs, UNIX sockets, hard links inside the
 * tree, names with odd bytes, unreadable modes; then the collector runs.
 * Invariants: it returns (a FIFO or a loop never blocks it: libFuzzer's
 * -timeout), nothing of the secret file next to output/ comes back,
 * every path is relative, without "..", empty components or invalid
 * UTF-8, and the caps hold. Runs as root, like the server. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "artifacts.h"
#include "mime.h"
#include "safefs.h"

#define SECRET "SECRET-FUZZ-MARKER-7c1e"

static char root[256];   /* holds secret.txt and out/ */
static char outdir[300]; /* the tree the "sandbox" writes */
static struct mime_db mime;

static void require(int cond, const char *what) {
  if (!cond) {
    fprintf(stderr, "fuzz_artifacts: invariant broken: %s\n", what);
    abort();
  }
}

static void wipe(int dirfd) {
  DIR *d = fdopendir(dup(dirfd));
  if (d == NULL)
    return;
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
      continue;
    if (unlinkat(dirfd, de->d_name, 0) == 0)
      continue;
    int sub = openat(dirfd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sub >= 0) {
      fchmod(sub, 0755);
      wipe(sub);
      close(sub);
    }
    unlinkat(dirfd, de->d_name, AT_REMOVEDIR);
  }
  closedir(d);
}

static void cleanup(void) {
  int fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    fchmod(fd, 0700);
    wipe(fd);
    close(fd);
  }
  rmdir(root);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
  snprintf(root, sizeof root, "%s/fuzz-artifacts-%d", base, (int)getpid());
  snprintf(outdir, sizeof outdir, "%s/out", root);
  mkdir(root, 0700);
  mkdir(outdir, 0755);
  char secret[300];
  snprintf(secret, sizeof secret, "%s/secret.txt", root);
  FILE *f = fopen(secret, "w");
  require(f != NULL, "secret file created");
  fputs(SECRET "\n", f);
  fclose(f);
  mime_db_load(&mime, "/etc/mime.types", NULL);
  atexit(cleanup);
  return 0;
}

/* A name from the input: mostly from a small alphabet (so that ops meet
 * each other's entries), sometimes odd bytes (non-UTF-8, newline, dots). */
static size_t take_name(const uint8_t *d, size_t n, size_t *i, char *out, size_t cap) {
  static const char *const common[] = {"a", "b",   "c.png", "d.txt",    "e",   "..",
                                       ".", "f g", "h\nx",  "\xff\xfe", "dir", "loop"};
  if (*i >= n)
    return 0;
  uint8_t sel = d[(*i)++];
  if (sel < 200) {
    snprintf(out, cap, "%s", common[sel % (sizeof common / sizeof common[0])]);
    return strlen(out);
  }
  size_t len = (size_t)(sel - 200) % 24 + 1, k = 0;
  while (k < len && *i < n && k + 1 < cap) {
    char c = (char)d[(*i)++];
    out[k++] = (c == '/' || c == '\0') ? '_' : c;
  }
  out[k] = '\0';
  return k;
}

/* Strict UTF-8: what the collector promises for every reported path. */
static bool utf8(const unsigned char *s) {
  while (*s != '\0') {
    int n = *s < 0x80             ? 0
            : (*s & 0xe0) == 0xc0 ? 1
            : (*s & 0xf0) == 0xe0 ? 2
            : (*s & 0xf8) == 0xf0 ? 3
                                  : -1;
    if (n < 0 || (n == 1 && *s < 0xc2))
      return false;
    for (int k = 1; k <= n; k++)
      if ((s[k] & 0xc0) != 0x80)
        return false;
    s += n + 1;
  }
  return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) {
  int out_fd = open(outdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  require(out_fd >= 0, "output directory opens");
  wipe(out_fd);
  int cur = dup(out_fd); /* where ops happen; can move into subdirectories */
  size_t i = 0;
  for (int ops = 0; i < n && ops < 64; ops++) {
    uint8_t op = d[i++] % 9;
    char name[64], other[64];
    if (take_name(d, n, &i, name, sizeof name) == 0)
      break;
    switch (op) {
    case 0:
      mkdirat(cur, name, 0755);
      break;
    case 1: { /* a file of up to ~6 KiB, some of it from the input */
      int fd = openat(cur, name, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC,
                      0644); /* O_NONBLOCK: an existing FIFO must not hold the harness */
      if (fd >= 0) {
        size_t len = i < n ? (size_t)d[i++] * 24 : 0;
        char buf[6144];
        memset(buf, 'x', sizeof buf);
        if (write(fd, buf, len < sizeof buf ? len : sizeof buf) < 0)
          (void)0;
        close(fd);
      }
      break;
    }
    case 2: { /* symlinks at what a hostile program would aim at */
      char target[512];
      static const char *const fixed[] = {"/", "/etc/shadow", "..", ".", "loop", "a"};
      uint8_t t = i < n ? d[i++] : 0;
      if (t % 4 == 0)
        snprintf(target, sizeof target, "%s/secret.txt", root);
      else if (t % 4 == 1)
        snprintf(target, sizeof target, "../secret.txt");
      else
        snprintf(target, sizeof target, "%s", fixed[t % 6]);
      symlinkat(target, cur, name);
      break;
    }
    case 3:
      mkfifoat(cur, name, 0644);
      break;
    case 4: { /* a UNIX socket, bound through /proc/self/fd to stay relative */
      int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
      struct sockaddr_un sa = {.sun_family = AF_UNIX};
      snprintf(sa.sun_path, sizeof sa.sun_path, "/proc/self/fd/%d/%s", cur, name);
      if (s >= 0) {
        if (bind(s, (struct sockaddr *)&sa, sizeof sa) < 0)
          (void)0;
        close(s);
      }
      break;
    }
    case 5: /* a hard link inside the tree (the sandbox's tmpfs holds nothing else) */
      if (take_name(d, n, &i, other, sizeof other) > 0)
        linkat(cur, other, cur, name, 0);
      break;
    case 6: { /* go down one level (never up: the harness itself stays in out/) */
      if (strcmp(name, "..") == 0 || strcmp(name, ".") == 0)
        break;
      int sub = openat(cur, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (sub >= 0) {
        close(cur);
        cur = sub;
      }
      break;
    }
    case 7:
      fchmodat(cur, name, 0, 0);
      break;
    case 8: /* back to the top */
      close(cur);
      cur = dup(out_fd);
      break;
    }
  }
  close(cur);

  struct artifact_caps caps = {.max_count = 40, .max_depth = 6, .per_file = 4096, .total = 16384};
  struct artifact_set set;
  memset(&set, 0, sizeof set);
  struct sbx_error err;
  require(artifacts_collect(out_fd, &caps, &mime, &set, &err) == 0, "collection succeeds");
  require(set.n <= caps.max_count, "at most max_count artifacts");
  require(set.content_bytes <= caps.total, "contents within the total cap");
  for (size_t k = 0; k < set.n; k++) {
    const struct artifact *a = &set.items[k];
    const char *p = a->relative_path;
    require(p != NULL && p[0] != '\0' && p[0] != '/', "a relative path");
    require(strstr(p, "//") == NULL && p[strlen(p) - 1] != '/', "no empty components");
    require(strcmp(p, "..") != 0 && strncmp(p, "../", 3) != 0 && strstr(p, "/../") == NULL &&
                (strlen(p) < 3 || strcmp(p + strlen(p) - 3, "/..") != 0),
            "no '..' component");
    require(utf8((const unsigned char *)p), "a UTF-8 path");
    require(a->content_len <= caps.per_file, "content within the per-file cap");
    require(a->content == NULL ||
                memmem(a->content, a->content_len, SECRET, strlen(SECRET)) == NULL,
            "nothing of the secret outside output/");
    require(a->mime != NULL, "a MIME type");
  }
  artifacts_free(&set);
  close(out_fd);
  return 0;
}
