/* visible.h: a program's output made safe for the user's terminal, for
 * sandbox-run's plain and --stream modes when stdout or stderr is a tty:
 * control characters shown as cat -v shows them (ESC as ^[, DEL as ^?,
 * the C1 controls U+0080..U+009F as M-^@..M-^_), so that a program in the
 * sandbox cannot set the terminal's title, write its clipboard (OSC 52) or
 * move its cursor. \n and \t pass as they are, and so does valid UTF-8
 * text; a byte that is not part of valid UTF-8 is shown as cat -v shows it
 * (M-x). Never used on a pipe or a file: those get the bytes unchanged. */
#ifndef SBX_VISIBLE_H
#define SBX_VISIBLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One stream's state: the start of a UTF-8 character a chunk ended in. */
struct visible {
  uint8_t held[4];
  size_t n_held;
};

/* The visible form of the bytes held in v and then data, malloc'd (free
 * it), its length in *out_len; NULL when out of memory. A character cut at
 * the end of data is held in v for the next call, unless final: then all
 * is written. */
char *visible_encode(struct visible *v, const uint8_t *data, size_t len, bool final,
                     size_t *out_len);

#endif
