/* proc_memory.h: a process's resident and proportional memory as the
 * kernel counts it in /proc/PID/smaps_rollup (the Rss: and Pss: lines),
 * for the zygotes' figures in GetInfo and /metrics (zygote_memory.c). The
 * text comes from the kernel but is parsed as if it did not: bounded,
 * strict, and a line that does not add up fails the whole read rather
 * than giving a figure that is not one. */
#ifndef SANDBOX_PROC_MEMORY_H
#define SANDBOX_PROC_MEMORY_H

#include <stddef.h>
#include <stdint.h>

/* The most of smaps_rollup read (it is about 1 KiB): a longer file is
 * refused, not cut. */
#define PROC_MEMORY_MAX_TEXT 4096

struct proc_memory {
  uint64_t rss_bytes; /* every page the process has in memory, shared ones whole */
  uint64_t pss_bytes; /* each page divided by the number of processes mapping it */
};

/* Parses text[0..len): each of "Rss:" and "Pss:" exactly once, as
 * "<name>:<spaces><decimal> kB\n" (the newline included: a cut line is
 * refused); other lines are not looked at. 0, or -1 with errno EBADMSG
 * (a line missing, repeated or malformed) or ERANGE (bytes past 2^64). */
int proc_memory_parse(const char *text, size_t len, struct proc_memory *out);

/* Reads fd (an open smaps_rollup) to its end, at most PROC_MEMORY_MAX_TEXT
 * bytes, and parses it. 0, or -1 with errno (EFBIG: longer than that;
 * ESRCH: the process ended, a zombie's file does not even open; then the
 * parse's). */
int proc_memory_read_fd(int fd, struct proc_memory *out);

#endif
