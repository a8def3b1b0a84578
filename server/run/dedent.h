/* dedent.h: removes the common leading whitespace of the lines of a piece
 * of code, as Python's textwrap.dedent does, so that code pasted from an
 * indented context runs. Pure: no I/O. */
#ifndef SBX_DEDENT_H
#define SBX_DEDENT_H

#include <stddef.h>

/* Returns a malloc'd, NUL-terminated copy of code[0..len) without the
 * longest run of spaces and tabs that starts every line that is not blank
 * (lines of only spaces and tabs become empty, as in textwrap.dedent).
 * *out_len gets its length. NULL when out of memory. */
char *dedent(const char *code, size_t len, size_t *out_len);

#endif
