/* pylib.h: the engine's Python helpers (pylib.c). */
#ifndef SANDBOX_PYLIB_H
#define SANDBOX_PYLIB_H

#include "sandbox.h"

/* Writes dir (made 0755) with sandboxd_cell.py and its compiled .pyc, so
 * that every run imports it without compiling it. 0, or -1 with err (the
 * caller removes dir). */
int pylib_write(const char *dir, struct sandbox_error *err);

#endif
