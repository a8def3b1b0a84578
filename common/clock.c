/* clock.c: see clock.h. */
#include "clock.h"

#include <time.h>

static uint64_t ms_of(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

uint64_t sbx_now_unix_ms(void) {
  return ms_of(CLOCK_REALTIME);
}

uint64_t sbx_monotonic_ms(void) {
  return ms_of(CLOCK_MONOTONIC);
}
