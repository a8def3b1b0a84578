/* fontlist.h: matplotlib's font list, made once per engine (fontlist.c). */
#ifndef SANDBOX_FONTLIST_H
#define SANDBOX_FONTLIST_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "sandbox.h"

struct fontlist {
  pid_t pid;           /* the maker; 0 when none was started */
  bool reaped;         /* pid is no longer ours */
  uint64_t started_ms; /* sbx_monotonic_ms at the start */
  enum sandbox_fontlist_state state;
  uint64_t ms;      /* how long the making took, once it ended */
  char why[300];    /* FAILED: the maker's last line of stderr, or the spawn error */
  char out[4200];   /* <lib>/matplotlib: what runs see at SANDBOX_LIB_DIR/matplotlib */
  char build[4200]; /* <lib>/matplotlib.build: the maker's MPLCONFIGDIR and HOME, 0700 */
};

/* Starts the maker in the background, at nice 10. Never fails the engine:
 * a maker that cannot start is state FAILED with the reason. */
void fontlist_start(struct fontlist *f, const char *lib_dir);
/* Reaps the maker when it ended (never blocks) and returns the state; why
 * and ms as in struct fontlist. One thread at a time with fontlist_stop. */
enum sandbox_fontlist_state fontlist_poll(struct fontlist *f);
/* Kills the maker if it still runs and reaps it. */
void fontlist_stop(struct fontlist *f);

#endif
