/* io.h: the loops around write(2) and sendmsg(2) that every layer needs:
 * a whole buffer written through EINTR and short writes, and file
 * descriptors passed with SCM_RIGHTS (the zygote's and the interpreter's
 * control sockets). Blocking fds only, except where a call says so. */
#ifndef SBX_IO_H
#define SBX_IO_H

#include <stddef.h>
#include <sys/types.h>

/* Writes all len bytes; 0, or -1 with errno. */
int sbx_write_all(int fd, const void *data, size_t len);
/* Sends all len bytes (len >= 1) on a stream or seqpacket socket, n_fds
 * descriptors (at most SBX_SEND_FDS_MAX: a zygote run's stdio, memfd,
 * report socket and a tree per mount) riding with the first byte,
 * MSG_NOSIGNAL. On a non-blocking socket it waits for room up to
 * timeout_ms per stall (-1: forever). 0, or -1 with errno (ETIMEDOUT). */
#define SBX_SEND_FDS_MAX 32
int sbx_send_with_fds(int sock, const void *data, size_t len, const int *fds, size_t n_fds,
                      int timeout_ms);

#endif
