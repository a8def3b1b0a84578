#!/usr/bin/python3
"""Mutation checks of the C client's fleet tests (not run by ctest; as root,
after ./scripts/build): each entry breaks one behaviour in client/ in place,
rebuilds build/, runs the tests that guard it, and prints CAUGHT when they
fail as they must, MISSED when they pass anyway; the source is restored and
rebuilt afterwards (also after an error). Arguments filter the entries by
name. SHOW=1 prints the failures' assertion lines.

    /usr/bin/python3 tests/clients/c/mutations.py [NAME-SUBSTRING...]
"""
import os
import subprocess
import sys

W = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
sys.path.insert(0, os.path.join(W, "tests", "lib"))
from mutate import run_mutations  # noqa: E402

PYTHON = "/usr/bin/python3"  # Debian's, with pytest
M = {
 "same endpoint always": ("client/fleet.c",
   "  uint64_t now = sbx_monotonic_ms();\n  unsigned best = UINT_MAX, fewest = UINT_MAX;",
   "  for (size_t i = 0; i < f->n_eps; i++)\n    if (is_live(f->eps[i]))\n      return f->eps[i];\n  uint64_t now = sbx_monotonic_ms();\n  unsigned best = UINT_MAX, fewest = UINT_MAX;",
   "py:test_calls_spread_over_every_server py:test_a_host_name_counts_once_per_address"),
 "UNKNOWN sent again elsewhere": ("client/client.c",
   "    Sandbox__V1__ReplyEnvelope *reply = call_on(c, ep, call, &not_sent);\n",
   "    Sandbox__V1__ReplyEnvelope *reply = call_on(c, ep, call, &not_sent);\n    if (reply == NULL && call->code == SBXC_UNKNOWN)\n      not_sent = true;\n",
   "py:test_a_server_killed_mid_load"),
 "a call's context resends after 500 ms": ("client/client.c",
   "(rv = nng_ctx_set_ms(ctx, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE))",
   "(rv = nng_ctx_set_ms(ctx, NNG_OPT_REQ_RESENDTIME, 500))",
   "py:test_a_server_killed_mid_load"),
 "sessions ignore their home": ("client/fleet.c",
   "        session != NULL ? session_home(f, session) : pick_connected(f, route->tried);",
   "        pick_connected(f, route->tried);",
   "py:test_a_session_stays_on_the_rule_home"),
 "a name is one endpoint": ("client/fleet.c",
   "        sbxc_key_set_add(keys, key) < 0) {",
   "        keys->n == 0 && sbxc_key_set_add(keys, key) < 0) {",
   "py:test_a_host_name_counts_once_per_address"),
 "a failed look-up empties the name": ("client/fleet.c",
   "    finish_resolution(f, i, found == 0 ? &keys : NULL, error);",
   "    (void)found;\n    finish_resolution(f, i, &keys, error);",
   "py:test_a_host_name_counts_once_per_address"),
 "draining not avoided": ("client/fleet.c",
   "  ep->avoid_until_ms = sbx_monotonic_ms() + SBXC_DRAINING_AVOID_MS;",
   "  ep->avoid_until_ms = 0;",
   "py:test_a_draining_server_sends_calls_elsewhere"),
 "ties to the largest key": ("client/fleet.c",
   "return score_a > score_b || (score_a == score_b && strcmp(key_a, key_b) < 0);",
   "return score_a > score_b || (score_a == score_b && strcmp(key_a, key_b) > 0);",
   "unit"),
 "score without the NUL": ("client/fleet.c",
   '  h = fnv1a32_more(h, "", 1); /* the NUL between them */',
   '',
   "unit py:test_a_session_stays_on_the_rule_home"),
 "IPv6 key without brackets": ("client/fleet.c",
   'snprintf(out, len, "%s://[%s]:%u", scheme, ip, port)',
   'snprintf(out, len, "%s://%s:%u", scheme, ip, port)',
   "unit"),
 "session memory drops the newest": ("client/session_pins.c",
   "    drop(p, p->oldest);\n    at = slot_of",
   "    drop(p, p->newest);\n    at = slot_of",
   "unit"),
}


def run_guard(test):
    """(failed, detail lines) for one guard: "unit" or "py:TEST_NAME"."""
    if test == "unit":
        p = subprocess.run([f"{W}/build/bin/unit_client"], capture_output=True, text=True)
        return p.returncode != 0, [l for l in p.stdout.splitlines() if "FAILED" in l][:3]
    env = dict(os.environ, SANDBOXD_BIN_DIR=f"{W}/build/bin", PYTHONDONTWRITEBYTECODE="1")
    p = subprocess.run([PYTHON, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-x",
                        "--tb=short", "--rootdir", f"{W}/tests/clients/c",
                        f"{W}/tests/clients/c/test_c_fleet.py::{test[3:]}"],
                       env=env, capture_output=True, text=True, timeout=600)
    if p.returncode not in (0, 1):  # not a test failure: pytest itself could not run
        raise RuntimeError(f"pytest exited {p.returncode}: {p.stdout[-800:]} {p.stderr[-800:]}")
    return p.returncode == 1, [l for l in p.stdout.splitlines() if l.startswith("E ")][:4]


def main():
    run_mutations(W, M, run_guard, sys.argv[1:])


if __name__ == "__main__":
    main()
