/* ids.h: run and session ids as clients choose them: [A-Za-z0-9._-], 1 to
 * ID_MAX characters, not "." or "..". Never used as paths (a session's
 * directory is named by a counter), but logged and echoed. */
#ifndef SBX_IDS_H
#define SBX_IDS_H

#include <stdbool.h>

#define ID_MAX 64

bool id_valid(const char *id);

#endif
