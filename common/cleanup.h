/* cleanup.h: scope-bound resource release (the crun/bubblewrap idiom), for
 * the engine, the server and the client alike. A variable declared
 * cleanup_free/cleanup_close/cleanup_fclose/cleanup_dir is released when it
 * leaves scope; steal_pointer/steal_fd hand ownership out on success. */
#ifndef SBX_CLEANUP_H
#define SBX_CLEANUP_H

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static inline void cleanup_freep(void *p) {
  free(*(void **)p);
}
static inline void cleanup_closep(int *fd) {
  if (*fd >= 0) {
    int saved = errno;
    close(*fd);
    errno = saved;
  }
}
static inline void cleanup_fclosep(FILE **f) {
  if (*f != NULL)
    fclose(*f);
}

static inline void cleanup_closedirp(DIR **d) {
  if (*d != NULL)
    closedir(*d);
}

#define cleanup_free __attribute__((cleanup(cleanup_freep)))
#define cleanup_dir __attribute__((cleanup(cleanup_closedirp)))
#define cleanup_close __attribute__((cleanup(cleanup_closep)))
#define cleanup_fclose __attribute__((cleanup(cleanup_fclosep)))

static inline void *steal_pointer_impl(void *pp) {
  void **p = (void **)pp;
  void *v = *p;
  *p = NULL;
  return v;
}
#define steal_pointer(pp) steal_pointer_impl(pp)

static inline int steal_fd(int *fd) {
  int v = *fd;
  *fd = -1;
  return v;
}

#endif
