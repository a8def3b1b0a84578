/* fronts.c: see fronts.h. Which fronts --http-fronts names, their one
 * client, and its settings: no retries (a refusal is answered to the HTTP
 * client, which decides), and a short wait for the inproc connection,
 * which is up from the start. */
#include "fronts.h"

#include <string.h>

#include "mcp_front.h"
#include "piston.h"
#include "server.h"
#include "text.h"

/* The inproc connection is up within milliseconds of the start; a call
 * that finds none is past the end of a drain. */
#define FRONTS_CONNECT_TIMEOUT_MS 2000

int fronts_add_routes(struct fronts *f, struct server *srv, struct http_listener *http,
                      struct sbx_error *err) {
  memset(f, 0, sizeof(*f));
  f->draining = &srv->draining;
  f->tenants = &srv->tenants;
  f->http_max_body_bytes = (size_t)srv->settings.http_max_body_bytes;
  f->piston_allow_net = srv->settings.piston_allow_net;
  const char *list = srv->settings.http_fronts;
  if (list[0] == '\0')
    return 0;
  f->runtimes = srv->runner.runtimes;
  char why[256];
  if (sbxc_client_open(&f->client, SERVER_FRONTS_URL, why, sizeof(why)) < 0)
    return sbx_error_set(err, SBX_INTERNAL, 0, "http-fronts: client: %s", why);
  sbxc_client_set_retries(f->client, 0);
  sbxc_client_set_connect_timeout_ms(f->client, FRONTS_CONNECT_TIMEOUT_MS);
  sbxc_client_set_max_request_bytes(f->client, (size_t)srv->settings.max_message_bytes);
  if (text_list_has(list, "piston") && piston_add_routes(f, http, err) < 0)
    return -1;
  if (text_list_has(list, "mcp") && mcp_front_add_routes(f, http, err) < 0)
    return -1;
  return 0;
}

void fronts_stop(struct fronts *f) {
  mcp_front_stop(f);
  if (f->client != NULL)
    sbxc_client_close(f->client);
  f->client = NULL;
}
