/* semver.h: whether a version satisfies a range, as node-semver's
 * satisfies() decides it for the ranges Piston's clients send ("*",
 * "3.11.2", "3.x", "3.11", "^3.10", "~3.11.0", ">=3.8 <4", "3.9 || 3.11",
 * "1.2.3 - 2.3.4"). Pure: no allocation, no I/O. */
#ifndef SBX_RUNTIME_SEMVER_H
#define SBX_RUNTIME_SEMVER_H

#include <stdbool.h>

/* version is MAJOR.MINOR.PATCH (no pre-release: the server's interpreter).
 * A range that does not parse is satisfied by nothing, as in node-semver.
 * Pre-release tags in a range never match a release, so they are refused
 * as not parsing; build metadata ("+...") is ignored. */
bool semver_satisfies(const char *version, const char *range);

#endif
