/* clock.h: the two clocks the server and the client read, in milliseconds:
 * the wall clock for deadlines that cross the wire, the monotonic one for
 * durations and idle times. (The engine's supervisor keeps its own
 * timespec arithmetic for poll deadlines.) */
#ifndef SBX_CLOCK_H
#define SBX_CLOCK_H

#include <stdint.h>

/* Unix time (CLOCK_REALTIME), for deadline_unix_ms. */
uint64_t sbx_now_unix_ms(void);
/* CLOCK_MONOTONIC. */
uint64_t sbx_monotonic_ms(void);
/* A duration in microseconds as whole milliseconds, rounded up: a run
 * that took any time at all never reports 0 ms. */
static inline uint64_t sbx_us_to_ms_ceil(uint64_t us) {
  return us / 1000 + (us % 1000 != 0);
}

#endif
