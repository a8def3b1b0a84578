/* installed_hello.c: a user's first program against an installed
 * libsandbox-client, built by tests/clients/c/test_c_install.py with only
 * `pkg-config --cflags --libs sandbox-client` (the installed header and
 * library, never the build tree's).
 *
 * Usage: installed_hello URL. Prints the file the library was loaded from,
 * then a hello world's status and stdout, then the status and message of a
 * request the server refuses (an unknown runtime). Exit 0 when both went as
 * expected, 1 otherwise; it must never hide a failure behind exit 0. */
#define _GNU_SOURCE /* dladdr */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include <sandbox_client.h>

static int run(sbxc_client *client, const char *code, const char *runtime, struct sbxc_result *r) {
  sbxc_request *req = sbxc_request_new();
  if (req == NULL || sbxc_request_set_code(req, code, strlen(code)) < 0 ||
      (runtime != NULL && sbxc_request_set_runtime(req, runtime) < 0)) {
    fprintf(stderr, "building the request failed\n");
    sbxc_request_free(req);
    return -1;
  }
  struct sbxc_limits limits = {.timeout_ms = 10000};
  sbxc_request_set_limits(req, &limits);
  int rc = sbxc_run_code(client, req, r);
  sbxc_request_free(req);
  return rc;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: installed_hello URL\n");
    return 2;
  }
  Dl_info where;
  if (dladdr((void *)sbxc_client_open, &where) == 0) {
    fprintf(stderr, "dladdr: the library's file is unknown\n");
    return 1;
  }
  printf("library %s\n", where.dli_fname);

  sbxc_client *client;
  char err[256];
  if (sbxc_client_open(&client, argv[1], err, sizeof(err)) < 0) {
    fprintf(stderr, "sbxc_client_open %s: %s\n", argv[1], err);
    return 1;
  }
  int ok = 1;
  struct sbxc_result r;
  run(client, "print('hello from the installed library')", NULL, &r);
  if (r.status == SBXC_OK)
    printf("hello %s %s %.*s", sbxc_status_name(r.status), sbxc_killed_by_name(r.killed_by),
           (int)r.stdout_len, (const char *)r.stdout_data);
  else
    printf("hello %s %s\n", sbxc_status_name(r.status), r.message);
  ok &= r.status == SBXC_OK;
  sbxc_result_free(&r);

  run(client, "print(1)", "no-such-runtime", &r);
  printf("refused %s %s\n", sbxc_status_name(r.status), r.message);
  ok &= r.status == SBXC_INVALID_ARGUMENT;
  sbxc_result_free(&r);

  sbxc_client_close(client);
  return ok ? 0 : 1;
}
