/* killed_by.c: see killed_by.h. */
#include "killed_by.h"

static const char *const names[KILLED_BY_N] = {"none",         "timeout", "memory",
                                               "output_limit", "signal",  "cancelled"};

const char *killed_by_name(int k) {
  return k >= 0 && k < KILLED_BY_N ? names[k] : "unknown";
}
