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

#endif
