/* json_text.h: writes bytes as a JSON string. Program output is arbitrary
 * bytes; JSON wants valid UTF-8, so invalid sequences become U+FFFD. */
#ifndef SANDBOX_JSON_TEXT_H
#define SANDBOX_JSON_TEXT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

void json_write_string(FILE *out, const uint8_t *data, size_t len);

#endif
