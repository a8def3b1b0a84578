/* session_pins.h: where a client last got an answer for each session id
 * (an endpoint key), for its most recently used session ids only: past the
 * cap the least recently used is forgotten, and the rendezvous rule finds
 * its endpoint again. Not thread-safe: the fleet's mutex guards it. One map
 * per fleet, so per client and per API key (a session id means a session of
 * the caller's tenant, docs/CLIENTS.md "API keys"): never a shared one. */
#ifndef SBXC_SESSION_PINS_H
#define SBXC_SESSION_PINS_H

#include <stddef.h>

struct sbxc_pins;

/* NULL when out of memory. cap > 0. */
struct sbxc_pins *sbxc_pins_new(size_t cap);
void sbxc_pins_free(struct sbxc_pins *p);
/* The key pinned for session_id (and now its most recent), or NULL. */
const char *sbxc_pins_get(struct sbxc_pins *p, const char *session_id);
/* Pins session_id to key. Returns 0, or -1 when out of memory. */
int sbxc_pins_put(struct sbxc_pins *p, const char *session_id, const char *key);
void sbxc_pins_remove(struct sbxc_pins *p, const char *session_id);
/* Forgets every pin. */
void sbxc_pins_clear(struct sbxc_pins *p);
size_t sbxc_pins_count(const struct sbxc_pins *p);

#endif
