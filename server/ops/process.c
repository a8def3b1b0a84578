/* process.c: see process.h. Reads /proc/self/stat, /proc/stat (boot time),
 * /proc/self/fd and the descriptor limit; allocates nothing. */
#include "process.h"

#include <dirent.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

static uint64_t boot_time_seconds(void) {
  FILE *f = fopen("/proc/stat", "re");
  if (f == NULL)
    return 0;
  char line[256];
  uint64_t btime = 0;
  while (fgets(line, sizeof(line), f) != NULL)
    if (sscanf(line, "btime %" SCNu64, &btime) == 1)
      break;
  fclose(f);
  return btime;
}

/* /proc/self/stat: the fields after the command (which may hold spaces and
 * parentheses, so parsing starts after the last ')'). */
static int read_stat(struct process_figures *p) {
  FILE *f = fopen("/proc/self/stat", "re");
  if (f == NULL)
    return -1;
  char buf[1024];
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  const char *rest = strrchr(buf, ')');
  if (rest == NULL)
    return -1;
  unsigned long long utime, stime, start, vsize;
  long long rss;
  /* state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
   * utime stime cutime cstime priority nice threads itrealvalue starttime
   * vsize rss */
  if (sscanf(rest + 1,
             " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d %*d %*d %*d %*d "
             "%llu %llu %lld",
             &utime, &stime, &start, &vsize, &rss) != 5)
    return -1;
  long tick = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
  if (tick <= 0 || page <= 0)
    return -1;
  p->cpu_seconds = (double)(utime + stime) / (double)tick;
  p->start_time_seconds = (double)boot_time_seconds() + (double)start / (double)tick;
  p->virtual_bytes = vsize;
  p->resident_bytes = rss > 0 ? (uint64_t)rss * (uint64_t)page : 0;
  return 0;
}

static uint64_t count_fds(void) {
  DIR *d = opendir("/proc/self/fd");
  if (d == NULL)
    return 0;
  uint64_t n = 0;
  const struct dirent *e;
  while ((e = readdir(d)) != NULL)
    n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

int process_figures_read(struct process_figures *p) {
  memset(p, 0, sizeof(*p));
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
    p->max_fds = rl.rlim_cur == RLIM_INFINITY ? UINT64_MAX : (uint64_t)rl.rlim_cur;
  p->open_fds = count_fds();
  return read_stat(p);
}
