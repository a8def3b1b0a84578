/* proc_memory.c: see proc_memory.h. Allocates nothing; never reads more
 * than PROC_MEMORY_MAX_TEXT bytes. */
#include "proc_memory.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

/* One "<name>:<spaces><decimal> kB" line, line[0..len) without its
 * newline, when it is name's: 1 with *bytes, 0 when it is another line,
 * -1 with errno when it is name's and malformed. */
static int parse_line(const char *line, size_t len, const char *name, uint64_t *bytes) {
  size_t n = strlen(name);
  if (len <= n || memcmp(line, name, n) != 0 || line[n] != ':')
    return 0;
  size_t i = n + 1;
  while (i < len && line[i] == ' ')
    i++;
  if (i == n + 1 || i == len || line[i] < '0' || line[i] > '9') {
    errno = EBADMSG;
    return -1;
  }
  uint64_t kib = 0;
  for (; i < len && line[i] >= '0' && line[i] <= '9'; i++) {
    unsigned d = (unsigned)(line[i] - '0');
    if (kib > (UINT64_MAX / 1024 - d) / 10) {
      errno = ERANGE;
      return -1;
    }
    kib = kib * 10 + d;
  }
  if (len - i != 3 || memcmp(line + i, " kB", 3) != 0) {
    errno = EBADMSG;
    return -1;
  }
  *bytes = kib * 1024;
  return 1;
}

int proc_memory_parse(const char *text, size_t len, struct proc_memory *out) {
  bool have_rss = false, have_pss = false;
  struct proc_memory m = {0};
  size_t at = 0;
  while (at < len) {
    const char *nl = memchr(text + at, '\n', len - at);
    size_t line_len = nl != NULL ? (size_t)(nl - (text + at)) : len - at;
    const char *line = text + at;
    struct {
      const char *name;
      uint64_t *value;
      bool *seen;
    } wanted[2] = {{"Rss", &m.rss_bytes, &have_rss}, {"Pss", &m.pss_bytes, &have_pss}};
    for (size_t k = 0; k < 2; k++) {
      uint64_t v;
      int rc = parse_line(line, line_len, wanted[k].name, &v);
      if (rc < 0)
        return -1;
      if (rc == 0)
        continue;
      if (*wanted[k].seen || nl == NULL) { /* repeated, or cut before its newline */
        errno = EBADMSG;
        return -1;
      }
      *wanted[k].seen = true;
      *wanted[k].value = v;
    }
    at += line_len + 1;
  }
  if (!have_rss || !have_pss) {
    errno = EBADMSG;
    return -1;
  }
  *out = m;
  return 0;
}

int proc_memory_read_fd(int fd, struct proc_memory *out) {
  char buf[PROC_MEMORY_MAX_TEXT + 1];
  size_t have = 0;
  for (;;) {
    ssize_t n = read(fd, buf + have, sizeof buf - have);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return -1;
    if (n == 0)
      break;
    have += (size_t)n;
    if (have == sizeof buf) {
      errno = EFBIG;
      return -1;
    }
  }
  return proc_memory_parse(buf, have, out);
}
