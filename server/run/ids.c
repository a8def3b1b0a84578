/* ids.c: see ids.h. */
#include "ids.h"

#include <string.h>

#include "dirs.h"

bool id_valid(const char *id) {
  size_t len = strlen(id);
  if (len == 0 || len > ID_MAX || dir_entry_is_dot(id))
    return false;
  for (const char *c = id; *c != '\0'; c++)
    if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
          *c == '.' || *c == '_' || *c == '-'))
      return false;
  return true;
}
