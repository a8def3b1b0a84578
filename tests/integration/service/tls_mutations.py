"""Mutation checks of the TLS tests (not run by ctest; as root, after
./scripts/build): each entry breaks one TLS behaviour in place (the server,
the C client or the Python client), rebuilds build/, runs the tests that
guard it, and prints CAUGHT when they fail as they must, MISSED when they
pass anyway; the source is restored and rebuilt afterwards (also after an
error). Arguments filter the entries by name. The TypeScript client's own
breaks are in client/typescript/scripts/check-tests-fail.py.

    cd tests && /usr/bin/python3 -m integration.service.tls_mutations [NAME-SUBSTRING...]

(run as a module from tests/, so that `lib` is importable as in the tests).

Guards: svc:GROUP (test_tls.py), py:TEST (tests/clients/python/test_tls.py),
ts:NAME (client/typescript/test/tls.test.ts, by test name).
"""
import os
import subprocess
import sys

from lib.mutate import run_mutations, run_pytest_group

W = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))

PYTHON = "/usr/bin/python3"
M = {
 "server: client certificates never required": ("server/rpc/tls_listen.c",
   "  case TLS_CLIENT_AUTH_REQUIRED:\n    return NNG_TLS_AUTH_MODE_REQUIRED;",
   "  case TLS_CLIENT_AUTH_REQUIRED:\n    return NNG_TLS_AUTH_MODE_NONE;",
   "svc:tls_required py:test_a_wrong_ca_or_name_is_refused ts:refused"),
 "server: the CA bundle not set": ("server/rpc/tls_listen.c",
   "  if (rv == 0 && files->ca_pem != NULL) {",
   "  if (rv == 0 && files->ca_pem == NULL) {",
   "svc:tls_required py:test_the_right_certificate_works ts:by.name"),
 "server: failed handshakes not logged": ("server/rpc/tls_listen.c",
   "  if (t->n == 0 || now - t->last_poll_ms < 1000)",
   "  if (t->n == 0 || now - t->last_poll_ms < UINT64_MAX)",
   "svc:tls_required ts:refused"),
 "server: optional's unverified clients not logged": ("server/rpc/conns.c",
   "    if (c->tls_log_unverified)\n      note_unverified(c, p);",
   "    (void)note_unverified;",
   "svc:tls_client_auth_optional"),
 "server: a tls+tcp listener without a certificate is not a settings error": ("server/settings.c",
   "    if (settings_url_is_tls(s->listen[i]) && (s->tls_cert[0] == '\\0' || s->tls_key[0] == '\\0'))",
   "    if (0 && settings_url_is_tls(s->listen[i]))",
   "svc:tls_start_faults"),
 "server: the key not checked against the certificate": ("server/tls/tls_files.c",
   "  else if (mbedtls_pk_check_pair(&crt->pk, &key) != 0)",
   "  else if (0)",
   "svc:tls_start_faults"),
 "server: an expired certificate accepted": ("server/tls/tls_files.c",
   "  if (mbedtls_x509_time_is_past(&crt->valid_to)) {",
   "  if (0) {",
   "svc:tls_start_faults"),
 "C client: the server not verified": ("client/tls_config.c",
   "(rv = nng_tls_config_auth_mode(cfg, NNG_TLS_AUTH_MODE_REQUIRED))",
   "(rv = nng_tls_config_auth_mode(cfg, NNG_TLS_AUTH_MODE_NONE))",
   "svc:tls_required svc:tls_client_auth_none"),
 "C client: no server name": ("client/tls_config.c",
   "  else if ((rv = nng_tls_config_server_name(cfg, name)) != 0 ||",
   "  else if ((rv = 0) != 0 ||",
   "svc:tls_required"),
 "C client: its certificate never sent": ("client/tls_config.c",
   "  else if (c->cert_pem != NULL &&",
   "  else if (c->cert_pem == NULL &&",
   "svc:tls_required"),
 "C client: dialers without the TLS configuration": ("client/fleet.c",
   "  if (tls != NULL && (rv = nng_dialer_set_ptr(*d, NNG_OPT_TLS_CONFIG, tls)) != 0)",
   "  if (0 && (rv = nng_dialer_set_ptr(*d, NNG_OPT_TLS_CONFIG, tls)) != 0)",
   "svc:tls_required"),
 "Python: the server not verified": ("client/python/sandboxd/_transport.py",
   "        mode = _nng.TLS_AUTH_MODE_REQUIRED if tls.verify else _nng.TLS_AUTH_MODE_NONE",
   "        mode = _nng.TLS_AUTH_MODE_NONE",
   "py:test_a_wrong_ca_or_name_is_refused"),
 "Python: one server name for every endpoint (the last one)": (
   "client/python/sandboxd/_transport.py",
   "                self._tls = {t.url: self.tls_configs.for_host(t.host) for t in self._targets}",
   "                self._tls = {t.url: self.tls_configs.for_host(self._targets[-1].host)\n"
   "                             for t in self._targets}",
   "py:test_each_server_is_checked_against_its_own_name"),
 "Python: no server name": ("client/python/sandboxd/_transport.py",
   "            _nng.check(lib.nng_tls_config_server_name(self.ptr, server_name.encode()),",
   "            _nng.check(0,",
   "py:test_a_wrong_ca_or_name_is_refused"),
}


def run_guard(guard):
    """(failed, detail lines) for one guard."""
    kind, name = guard.split(":", 1)
    env = dict(os.environ, SANDBOXD_BIN_DIR=f"{W}/build/bin", PYTHONDONTWRITEBYTECODE="1")
    if kind == "svc":
        return run_pytest_group(f"{W}/tests/integration/service/test_tls.py", name,
                                f"{W}/build/bin")
    if kind == "py":
        env["PYTHONPATH"] = f"{W}/build/python"
        p = subprocess.run([PYTHON, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--tb=line",
                            "--rootdir", f"{W}/tests/clients/python",
                            f"{W}/tests/clients/python/test_tls.py", "-k", name],
                           env=env, capture_output=True, text=True, timeout=600)
        if p.returncode not in (0, 1):
            raise RuntimeError(f"pytest exited {p.returncode}: {p.stdout[-800:]}")
        return p.returncode == 1, [l for l in p.stdout.splitlines() if "Error" in l][:4]
    p = subprocess.run(["node", "--test", "--test-name-pattern", name, "dist/test/tls.test.js"],
                       cwd=f"{W}/client/typescript", env=env, capture_output=True, text=True,
                       timeout=600)
    return p.returncode != 0, [l for l in p.stdout.splitlines() if l.startswith("not ok")][:4]


def main():
    run_mutations(W, M, run_guard, sys.argv[1:])


if __name__ == "__main__":
    main()
