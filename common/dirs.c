/* dirs.c: see dirs.h. */
#include "dirs.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

DIR *opendir_at(int dir_fd) {
  /* A new open file description: readdir's offset is not shared with
   * dir_fd, and closedir does not close dir_fd. */
  int fd = openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return NULL;
  DIR *d = fdopendir(fd);
  if (d == NULL) {
    int e = errno;
    close(fd);
    errno = e;
  }
  return d;
}
