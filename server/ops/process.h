/* process.h: this process's figures as Prometheus' standard process
 * collector names them (process_resident_memory_bytes, process_open_fds,
 * ...), read from /proc/self at each scrape. */
#ifndef SBX_OPS_PROCESS_H
#define SBX_OPS_PROCESS_H

#include <stdint.h>

struct process_figures {
  double cpu_seconds;        /* user + system, every thread */
  uint64_t resident_bytes;   /* RSS */
  uint64_t virtual_bytes;    /* vsize */
  uint64_t open_fds;         /* entries of /proc/self/fd */
  uint64_t max_fds;          /* RLIMIT_NOFILE, soft */
  double start_time_seconds; /* since the epoch */
};

/* 0, or -1 when /proc/self could not be read (the figures are then 0). */
int process_figures_read(struct process_figures *p);

#endif
