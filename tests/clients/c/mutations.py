#!/usr/bin/python3
"""Mutation checks of the C client's fleet and streaming tests (not run by ctest; as root,
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
 "ties to the largest key": ("client/endpoint.c",
   "return score_a > score_b || (score_a == score_b && strcmp(key_a, key_b) < 0);",
   "return score_a > score_b || (score_a == score_b && strcmp(key_a, key_b) > 0);",
   "unit"),
 "score without the NUL": ("client/endpoint.c",
   '  h = fnv1a32_more(h, "", 1); /* the NUL between them */',
   '',
   "unit py:test_a_session_stays_on_the_rule_home"),
 "IPv6 key without brackets": ("client/endpoint.c",
   'snprintf(out, len, "%s://[%s]:%u", scheme, ip, port)',
   'snprintf(out, len, "%s://%s:%u", scheme, ip, port)',
   "unit"),
 "session memory drops the newest": ("client/session_pins.c",
   "    drop(p, p->oldest);\n    at = slot_of",
   "    drop(p, p->newest);\n    at = slot_of",
   "unit"),
 # Streaming and cancel (test_c_stream.py).
 "watches go where the fleet picks": ("client/stream.c",
   "                      .reply_ms = (uint64_t)wait_ms + SBXC_WATCH_MARGIN_MS,\n                      .pinned = run->ep,\n",
   "                      .reply_ms = (uint64_t)wait_ms + SBXC_WATCH_MARGIN_MS,\n",
   "stream:test_streams_in_a_fleet_are_watched_where_they_started"),
 "cancels go where the fleet picks": ("client/stream.c",
   "                        .reply_ms = SBXC_CANCEL_REPLY_MS,\n                        .pinned = run->ep,\n",
   "                        .reply_ms = SBXC_CANCEL_REPLY_MS,\n",
   "stream:test_a_signal_cancels_the_run_and_its_whole_tree"),
 "a refused watch read as an answer": ("client/stream.c",
   "  if (ws->reply->status != SANDBOX__V1__CODE__OK) {",
   "  if (false) {",
   "stream:test_an_unknown_run_id_is_not_found"),
 "Ctrl-C sends no cancel": ("client/sandbox_run.c",
   "  if (sbxc_cancel_run(s->client, run, NULL, NULL, err, sizeof(err)) < 0)",
   "  if ((void)run, 0)",
   "stream:test_a_signal_cancels_the_run_and_its_whole_tree"),
 "signals not blocked (the default action kills sandbox-run)": ("client/sandbox_run.c",
   "  pthread_sigmask(SIG_BLOCK, &all, NULL);",
   "  (void)all;",
   "stream:test_a_signal_cancels_the_run_and_its_whole_tree"),
 "a second Ctrl-C waits": ("client/sandbox_run.c",
   "  sigaction(SIGINT, &sa, NULL);\n  sigaction(SIGTERM, &sa, NULL);\n",
   "",
   "stream:test_a_second_ctrl_c_exits_without_waiting"),
 "cancelled exits 128+9": ("client/sandbox_run.c",
   "  if (r->killed_by == SBXC_KILLED_BY_CANCELLED)\n    return EXIT_CANCELLED;\n",
   "",
   "stream:test_a_signal_cancels_the_run_and_its_whole_tree stream:test_watch_and_cancel_a_run_by_its_id"),
 "no UTF-8 hold-back": ("client/json.c",
   "    return need > back ? back : 0;",
   "    return need > back ? 0 : 0;",
   "unit:json stream:test_a_character_split_between_chunks_is_decoded_whole"),
 "offsets not advanced": ("client/stream.c",
   "    *offset = start + len;",
   "    (void)start;",
   "stream:test_output_arrives_while_the_program_runs"),
 "output only at the end": ("client/stream.c",
   "    if (on_output != NULL)\n      on_output(user, stream, data + skip, len - (size_t)skip);",
   "    if (on_output != NULL && len > 1 << 30)\n      on_output(user, stream, data + skip, len - (size_t)skip);",
   "stream:test_output_arrives_while_the_program_runs stream:test_streams_in_a_fleet_are_watched_where_they_started"),
}


def run_guard(test):
    """(failed, detail lines) for one guard: "unit" (unit_client), "unit:NAME"
    (unit_NAME), "py:TEST_NAME" (test_c_fleet.py) or "stream:TEST_NAME"
    (test_c_stream.py)."""
    if test == "unit" or test.startswith("unit:"):
        name = test[5:] or "client"
        p = subprocess.run([f"{W}/build/bin/unit_{name}"], capture_output=True, text=True)
        return p.returncode != 0, [l for l in p.stdout.splitlines() if "FAILED" in l][:3]
    kind, name = test.split(":", 1)
    path = {"py": "test_c_fleet.py", "stream": "test_c_stream.py"}[kind]
    env = dict(os.environ, SANDBOXD_BIN_DIR=f"{W}/build/bin", PYTHONDONTWRITEBYTECODE="1")
    p = subprocess.run([PYTHON, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-x",
                        "--tb=short", "--rootdir", f"{W}/tests/clients/c",
                        f"{W}/tests/clients/c/{path}::{name}"],
                       env=env, capture_output=True, text=True, timeout=600)
    if p.returncode not in (0, 1):  # not a test failure: pytest itself could not run
        raise RuntimeError(f"pytest exited {p.returncode}: {p.stdout[-800:]} {p.stderr[-800:]}")
    return p.returncode == 1, [l for l in p.stdout.splitlines() if l.startswith("E ")][:4]


def main():
    run_mutations(W, M, run_guard, sys.argv[1:])


if __name__ == "__main__":
    main()
