/* nngstat.h: reading a snapshot of nng's statistics (nng_stats_get), for
 * what nng reports nowhere else: the dials and accepts that failed (a TLS
 * handshake refused on either side). nng 1.5.2's nng_stat_find_dialer and
 * nng_stat_find_listener compare the id only at the top of the tree and
 * return the first dialer (listener) of the whole snapshot below it; these
 * walk the tree and match each scope's "id" statistic instead. Pure: they
 * only read the snapshot's memory. */
#ifndef SBX_NNGSTAT_H
#define SBX_NNGSTAT_H

#include <nng/nng.h>
#include <stdint.h>

/* The scope named scope ("dialer", "listener") whose "id" is id, or NULL. */
nng_stat *sbx_nngstat_scope(nng_stat *root, const char *scope, uint32_t id);
/* The value of the statistic name directly below scope; 0 when absent. */
uint64_t sbx_nngstat_value(nng_stat *scope, const char *name);

#endif
