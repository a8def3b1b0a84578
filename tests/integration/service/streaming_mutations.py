"""Mutation checks of the streaming tests (not run by ctest; as root, after
./scripts/build): each entry breaks one behaviour of StartRun, WatchRun or
CancelRun in the server, rebuilds build/, runs the test_streaming.py groups
that guard it, and prints CAUGHT when they fail as they must, MISSED when
they pass anyway (tests/lib/mutate.py). Arguments filter by name.

    cd tests && /usr/bin/python3 -m integration.service.streaming_mutations [NAME-SUBSTRING...]

(run as a module from tests/, so that `lib` is importable as in the tests).
"""
import os
import sys

from lib.mutate import run_mutations, run_pytest_group

W = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))

M = {
 "engine: the cancel fd not polled": ("server/sandbox/supervise.c",
   "  if (s->cancel_fd >= 0 && s->cause == SUPERVISE_CAUSE_NONE) {",
   "  if (0) {",
   "streaming_cancel"),
 "engine: output not passed on as it is read": ("server/sandbox/supervise.c",
   "    if (took > 0 && s->on_output != NULL)",
   "    if (0)",
   "streaming_chunks"),
 "table: watchers not woken by output": ("server/rpc/runs.c",
   "  if (run->waiters != NULL)\n    answer_waiters(t, run, false, NULL, &o);",
   "  (void)answer_waiters;",
   "streaming_chunks"),
 "table: no bound on a reply's bytes": ("server/rpc/runs.c",
   "#include \"runs.h\"\n",
   "#include \"runs.h\"\n#undef RUNS_CHUNK_BYTES\n#define RUNS_CHUNK_BYTES (64u << 20)\n",
   "streaming_chunks"),
 "table: a queued run cancelled stays in the queue": ("server/rpc/runs.c",
   "  if (run->state == RUN_QUEUED && work_queue_remove(&srv->queue, run)) {",
   "  if (0) {",
   "streaming_cancel"),
 "run: a cancel while preparing not checked before the code starts": ("server/run/run.c",
   "  if (cancel_pending(call))",
   "  if (0 && cancel_pending(call))",
   "streaming_cancel"),
 "table: outcomes never expire": ("server/rpc/runs.c",
   "      if (run->state == RUN_DONE && run->started && !run->pinned && run->expires_ms <= now) {",
   "      if (0) {",
   "streaming_errors streaming_watchers"),
 "table: no cap on started runs": ("server/rpc/runs.c",
   "  if (started && t->n_started >= t->max_started) {",
   "  if (0) {",
   "streaming_errors"),
 "table: outcomes already read do not give way at the cap": ("server/rpc/runs.c",
   "      if (r->started && r->delivered && !r->pinned && r->waiters == NULL)",
   "      if (0)",
   "streaming_errors"),
 "table: no cap on waiting watchers": ("server/rpc/runs.c",
   "  if (t->n_waiting >= t->max_waiting) {\n    pthread_mutex_unlock(&t->lock);",
   "  if (0) {\n    pthread_mutex_unlock(&t->lock);",
   "streaming_errors"),
 "table: duplicate run ids accepted": ("server/rpc/runs.c",
   "  if (find(t, run->run_id, true) != NULL) {",
   "  if (0) {",
   "streaming_errors"),
 "table: waiting watchers never answered at their wait_ms": ("server/rpc/runs.c",
   "        if (call->wait.deadline_ms > now) {",
   "        if (1) {",
   "streaming_errors streaming_watchers"),
 "table: stream copies never freed": ("server/rpc/runs.c",
   "  free(run->out.data);\n  free(run->err.data);",
   "  (void)0;",
   "streaming_watchers"),
 "handlers: WatchRun refused while draining": ("server/rpc/handlers.c",
   "      strcmp(m->name, \"WatchRun\") != 0 && strcmp(m->name, \"CancelRun\") != 0) {",
   "      1) {",
   "streaming_drain"),
}


def run_guard(group):
    return run_pytest_group(f"{W}/tests/integration/service/test_streaming.py", group,
                            f"{W}/build/bin")


def main():
    run_mutations(W, M, run_guard, sys.argv[1:])


if __name__ == "__main__":
    main()
