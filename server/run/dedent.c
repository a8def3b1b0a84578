/* dedent.c: see dedent.h. textwrap.dedent's rules: the margin is the longest
 * common prefix of the indentation of the non-blank lines ("\t" and " " are
 * different characters); blank lines (only spaces and tabs) do not count
 * and are emptied. */
#include "dedent.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static size_t indent_len(const char *p, const char *end) {
  size_t n = 0;
  while (p + n < end && (p[n] == ' ' || p[n] == '\t'))
    n++;
  return n;
}

char *dedent(const char *code, size_t len, size_t *out_len) {
  const char *end = code + len;
  const char *margin = NULL; /* points into the first non-blank line */
  size_t margin_len = 0;
  for (const char *line = code; line < end;) {
    const char *nl = memchr(line, '\n', (size_t)(end - line));
    const char *eol = nl != NULL ? nl : end;
    size_t ind = indent_len(line, eol);
    bool blank = line + ind == eol;
    if (!blank) {
      if (margin == NULL) {
        margin = line;
        margin_len = ind;
      } else {
        size_t common = 0;
        while (common < margin_len && common < ind && margin[common] == line[common])
          common++;
        margin_len = common;
      }
    }
    line = nl != NULL ? nl + 1 : end;
  }

  char *out = malloc(len + 1);
  if (out == NULL)
    return NULL;
  size_t n = 0;
  for (const char *line = code; line < end;) {
    const char *nl = memchr(line, '\n', (size_t)(end - line));
    const char *eol = nl != NULL ? nl : end;
    size_t ind = indent_len(line, eol);
    if (line + ind == eol) {
      /* blank: keep only the line break */
    } else {
      size_t skip = margin_len; /* every non-blank line starts with the margin */
      memcpy(out + n, line + skip, (size_t)(eol - line) - skip);
      n += (size_t)(eol - line) - skip;
    }
    if (nl != NULL)
      out[n++] = '\n';
    line = nl != NULL ? nl + 1 : end;
  }
  out[n] = '\0';
  *out_len = n;
  return out;
}
