/* inputs.c: what a run needs before its workspace is touched: the
 * environment of its requirements (from the store, or built now on this
 * slot by the installer), then every input file given by URL, downloaded
 * by the server. A failure here means nothing ran. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "clock.h"
#include "download.h"
#include "run_internal.h"
#include "text.h"

/* Takes or builds the environment of set; holds it in sc on success. */
static int acquire_environment(struct runner *r, unsigned slot, const struct requirement_set *set,
                               struct run_scratch *sc, struct sbx_error *err) {
  struct installer *in = &r->installer;
  char key[REQUIREMENT_KEY_HEX + 1];
  cleanup_free char *material = NULL;
  if (requirement_key(set, in->info.key_context, key, &material) < 0)
    return sbx_error_set(err, SBX_INTERNAL, ENOMEM, "requirements: the environment's key");
  struct envstore_env *env = NULL;
  switch (envstore_acquire(&in->store, key, &env, err)) {
  case ENVSTORE_USE:
    break;
  case ENVSTORE_BUILD:
    if (install_build(in, slot, set, env, material, err) < 0)
      return -1;
    sc->env_built = true;
    break;
  case ENVSTORE_ERROR:
    return -1;
  }
  sc->pkg_env = env;
  sc->store = &in->store;
  envstore_site_path(&in->store, env, sc->env_site, sizeof(sc->env_site));
  return 0;
}

int run_prepare_requirements(struct runner *r, unsigned slot, const struct run_call *call,
                             struct run_scratch *sc, struct sbx_error *err) {
  const Sandbox__V1__RunCodeRequest *req = call->req;
  if (req->n_requirements == 0)
    return 0;
  if (!r->installer.info.available) /* checked at dispatch; the engine may say so first */
    return sbx_error_set(err, SBX_FAILED_PRECONDITION, 0,
                         "requirements: this server cannot install packages: %s",
                         r->installer.info.why_unavailable);
  struct requirement_set set;
  if (requirement_set_build((const char *const *)req->requirements, req->n_requirements,
                            r->settings->requirements_allow_urls != 0, &set, err) < 0)
    return -1; /* validation passed them: out of memory */
  uint64_t t0 = sbx_monotonic_ms();
  int rc = acquire_environment(r, slot, &set, sc, err);
  requirement_set_free(&set);
  sc->env_ms = sbx_monotonic_ms() - t0;
  return rc;
}

int run_fetch_files(struct runner *r, const struct run_call *call, struct run_scratch *sc,
                    struct sbx_error *err) {
  const Sandbox__V1__RunCodeRequest *req = call->req;
  uint64_t total = 0;
  for (size_t i = 0; i < req->n_files; i++)
    if (req->files[i]->source_case == SANDBOX__V1__FILE__SOURCE_CONTENT)
      total += req->files[i]->content.len;
  for (size_t i = 0; i < req->n_files; i++) {
    const Sandbox__V1__File *f = req->files[i];
    if (f->source_case != SANDBOX__V1__FILE__SOURCE_URL)
      continue;
    /* Each file within --max-file-bytes, all of them within the quota. */
    uint64_t quota = call->limits.tmp_bytes;
    uint64_t room = quota > total ? quota - total : 0;
    uint64_t cap = (uint64_t)r->settings->max_file_bytes;
    struct download_policy policy = download_policy_from(r->settings, cap < room ? cap : room);
    size_t len;
    if (download_fetch(&policy, f->url, &sc->downloads[i], &len, err) < 0) {
      char url[300];
      text_printable(f->url, strlen(f->url), url, sizeof(url), false);
      return sbx_error_wrap(err, "files[%zu].url %s: download failed", i, url);
    }
    sc->files[i].data = sc->downloads[i];
    sc->files[i].len = len;
    total += len;
  }
  return 0;
}
