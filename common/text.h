/* text.h: bytes from a request or from inside a sandbox, made safe to show.
 * One UTF-8 decoder (RFC 3629: no overlongs, no surrogates, nothing above
 * U+10FFFF) and one printable copy for messages and log lines, shared by
 * the engine's CLI, the server and the client. */
#ifndef SBX_TEXT_H
#define SBX_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Length of the valid UTF-8 sequence at p (1 to 4), 0 when it is not one. */
size_t text_utf8_seq_len(const uint8_t *p, size_t n);

/* The whole of s[0..len) is valid UTF-8 (NUL bytes count as valid). */
bool text_utf8_valid(const char *s, size_t len);

/* A malloc'd, NUL-terminated copy of data with every invalid sequence
 * replaced by U+FFFD; *out_len (may be NULL) gets its length, which may
 * count NUL bytes the data held. NULL when out of memory. */
char *text_utf8_repair(const uint8_t *data, size_t len, size_t *out_len);

/* Copies in (NUL-terminated) to out as printable ASCII for a message or a
 * log line: bytes outside 0x20..0x7e, and '"', become '?'; with
 * keep_newlines, '\n' and '\t' stay. Always NUL-terminates out. */
void text_printable(const char *in, size_t in_len, char *out, size_t out_len, bool keep_newlines);

/* Whether item is one of the entries of a comma-separated list (exactly,
 * as the settings hold them: --http-fronts, --http-allowed-hosts). */
bool text_list_has(const char *list, const char *item);

/* "64 KiB", "128 MiB", "1.5 GiB", "100 bytes": sizes in messages. */
void text_format_bytes(uint64_t bytes, char *buf, size_t len);

/* True when every byte of s is graphic ASCII (0x21 to 0x7e): no spaces,
 * no control characters, nothing beyond ASCII. For URLs from settings and
 * requests. */
bool text_graphic_ascii(const char *s);
/* The value of one hex digit (either case), or -1. */
int text_hex_digit(char c);

#endif
