/* dns_name.c: see dns_name.h. */
#include "dns_name.h"

#include <stdbool.h>

static bool name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_';
}

const char *dns_name_problem(const char *s, size_t n) {
  if (n == 0)
    return "an empty name";
  if (n > DNS_NAME_TEXT_MAX)
    return "a DNS name longer than 253 bytes";
  size_t label = 0;
  for (size_t i = 0; i <= n; i++) {
    if (i == n || s[i] == '.') {
      if (label == 0)
        return "an empty label (a dot at the start, or two dots)";
      if (label > DNS_LABEL_TEXT_MAX)
        return "a label longer than 63 bytes";
      if (s[i - label] == '-' || s[i - 1] == '-')
        return "a label starts or ends with '-'";
      label = 0;
      continue;
    }
    if (!name_char(s[i]))
      return "a DNS name has only letters, digits, '-', '_' and dots";
    label++;
  }
  return NULL;
}
