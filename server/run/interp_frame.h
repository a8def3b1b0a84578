/* interp_frame.h: the frame codec of an interpreter's control socket (the
 * stream socket that is sandboxd_cell's kernel's stdin). A frame is an
 * 8-byte little-endian length and that many bytes of JSON, an object, both
 * ways. The kernel says {"op":"ready"} once, with its credentials; each
 * cell goes as {"code","args","env","cpu_s","seq"} with its stdin, stdout
 * and stderr on the frame's first byte (SCM_RIGHTS), and is answered by
 * {"op":"done","seq",...}.
 *
 * Everything the kernel sends is hostile: a length past
 * INTERP_FRAME_MAX, bytes that are not JSON or JSON that is not an object
 * end the channel; the buffer never holds more than one frame's bytes; a
 * result is cut to INTERP_RESULT_MAX again here; an fd the kernel passes
 * is never kept. Pure but for the socket calls: unit-tested and fuzzed. */
#ifndef SBX_INTERP_FRAME_H
#define SBX_INTERP_FRAME_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "buf.h"
#include "interp.h"

#define INTERP_FRAME_HEAD 8
#define INTERP_FRAME_MAX (1u << 20) /* a done frame: the result (64 KiB) as JSON, and more */
#define INTERP_RESULT_MAX 65536u    /* sandboxd_cell's cap, enforced again */
#define INTERP_FRAME_SEND_STALL_MS 5000

/* Takes the first complete frame out of in (the bytes received so far):
 * 1 with its JSON object in *obj (the caller's to json_decref), 0 when no
 * frame is complete yet, -1 when the bytes are not a frame (a length past
 * INTERP_FRAME_MAX, not JSON, JSON that is not an object). */
int interp_frame_parse(struct sbx_buf *in, json_t **obj);

/* Receives what the non-blocking sock has into in and parses it: as
 * interp_frame_parse, and -1 too when the peer closed or recv failed.
 * With pid (non-NULL): the first credentials that came with the bytes
 * whose uid is want_uid set *pid, while it is 0. Fds passed are closed. */
int interp_frame_recv(int sock, struct sbx_buf *in, json_t **obj, pid_t *pid, uid_t want_uid);

/* At most this many frames are taken per interp_frame_recv_done: a kernel
 * (or a cell writing on its socket) sends frames faster than they are
 * parsed, and a reader that took all there is would never get back to its
 * deadlines. */
#define INTERP_FRAMES_PER_READ 16

enum interp_recv {
  INTERP_RECV_GONE = -1, /* the peer closed, or sent bytes that are not a frame */
  INTERP_RECV_NONE = 0,  /* no done among the frames there were: poll again */
  INTERP_RECV_DONE = 1,  /* *done is the answer of the cell asked for */
  INTERP_RECV_MORE = 2,  /* INTERP_FRAMES_PER_READ taken, no done: call again
                          * without waiting (more may be in in already) */
};
/* Takes the frames sock has, at most INTERP_FRAMES_PER_READ of them, until
 * the done of cell seq (into *done, the caller's to json_decref). Every
 * other frame (an earlier cell's done, one a cell forged) is dropped. */
enum interp_recv interp_frame_recv_done(int sock, struct sbx_buf *in, uint64_t seq, json_t **done);

/* Sends one frame (len bytes of JSON), the n_fds fds riding with its first
 * byte; waits up to INTERP_FRAME_SEND_STALL_MS for room each time the
 * socket is full. 0, or -1 with errno. */
int interp_frame_send(int sock, const char *json, size_t len, const int *fds, size_t n_fds);

/* A cell's frame body (malloc'd JSON), NULL when out of memory. */
char *interp_frame_cell(const struct interp_cell *c, uint64_t seq);

/* Whether obj is the kernel's {"op":"ready"}. */
bool interp_frame_is_ready(const json_t *obj);
/* Whether obj is the done of cell seq (a done of another cell, an earlier
 * one's or one a cell forged, is not this call's answer). */
bool interp_frame_is_done(const json_t *obj, uint64_t seq);
/* A done's figures into res (exit code, CPU) and out (interrupted, the
 * result cut to INTERP_RESULT_MAX on a character's boundary), checked. */
void interp_frame_take_done(const json_t *obj, struct sandbox_result *res,
                            struct interp_outcome *out);

#endif
