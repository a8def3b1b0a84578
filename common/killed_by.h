/* killed_by.h: why a run was ended, as logs, the CLIs and JSON spell it:
 * "none", "timeout", "memory", "output_limit", "signal", "cancelled". One table for the
 * three enums that carry it (the engine's sandbox_killed_by, the wire's
 * sandbox.v1.KilledBy, the C client's sbxc_killed_by), which share their
 * values: each side that sees two of them asserts it at compile time. */
#ifndef SBX_KILLED_BY_H
#define SBX_KILLED_BY_H

#define KILLED_BY_N 6 /* none, timeout, memory, output_limit, signal, cancelled */

/* The name of value k, "unknown" for anything else. */
const char *killed_by_name(int k);

#endif
