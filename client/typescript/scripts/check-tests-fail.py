#!/usr/bin/env python3
"""Breaks the client once per entry below (a source edit), rebuilds with tsc,
runs the test that must catch it, reports whether it failed, and restores
the source. Usage: scripts/check-tests-fail.py [INDEX...] (root, after
./scripts/build; SANDBOXD_BIN_DIR defaults to ../../build/bin)."""
import os, subprocess, sys, re
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("SANDBOXD_BIN_DIR", os.path.join(ROOT, "../../build/bin"))
breaks = [
 ("peer protocol id not checked", "src/wire.ts", "  if (protocol !== wantProtocol) {", "  if (false) {", "unit", "wrong SP protocol id"),
 ("incoming length cap not checked", "src/wire.ts", "    if (len > BigInt(this.maxBytes)) {", "    if (false) {", "unit", "frame decoder: a length over"),
 ("reply id high bit not checked", "src/wire.ts", "  if (!isRequestId(requestId)) {\n    throw new WireError(`a reply's", "  if (false) {\n    throw new WireError(`a reply's", "unit", "garbage after the handshake"),
 ("ipc framed like tcp", "src/address.ts", 'return transport === "ipc" ? "ipc" : "tcp";', 'return "tcp";', "methods", "health and info"),
 ("a broken connection retried (resent)", "src/client.ts", "        throw transportError(err, details);\n", "        const te = transportError(err, details);\n        if (te.code === Code.UNKNOWN) return { retriable: true, error: te, endpoint: key };\n        throw te;\n", "fleet", "killed mid-load"),
 ("UNKNOWN reported as UNAVAILABLE", "src/client.ts", '      return errorFor(Code.UNKNOWN, `${err.message}; the code may or may not have run`, details(false, true));', '      return errorFor(Code.UNAVAILABLE, err.message, details(false, false));', "faults", "UNKNOWN when the server"),
 ("no reply in time reported as UNKNOWN", "src/client.ts", '      return errorFor(Code.DEADLINE_EXCEEDED, `${err.message}; the code may or may not have run`, details(false, true));', '      return errorFor(Code.UNKNOWN, `${err.message}; the code may or may not have run`, details(false, true));', "faults", "from the client"),
 ("every server error retried", "src/client.ts", "if (reply.status === Code.RESOURCE_EXHAUSTED || reply.status === Code.UNAVAILABLE) {", "if (true) {", "methods", "FAILED_PRECONDITION"),
 ("RESOURCE_EXHAUSTED never retried", "src/client.ts", "if (reply.status === Code.RESOURCE_EXHAUSTED || reply.status === Code.UNAVAILABLE) {", "if (reply.status === Code.UNAVAILABLE) {", "faults", "RESOURCE_EXHAUSTED"),
 ("no GetInfo size check", "src/client.ts", "    if (wire > SMALLEST_SERVER_CAP && spec.method !== METHOD.getInfo) {", "    if (false) {", "methods", "max-message-bytes"),
 ("one request at a time per client", "src/client.ts", "        replyBytes = await lease.conn.request(envelope, timeoutMs, spec.signal);", "        const g = globalThis as { serial?: Promise<unknown> };\n        const p = (g.serial ?? Promise.resolve()).then(() => lease.conn.request(envelope, timeoutMs, spec.signal));\n        g.serial = p.catch(() => undefined);\n        replyBytes = await p;", "faults", "16 calls"),
 ("always the first usable endpoint", "src/fleet.ts", "    return ties[this.rr % ties.length];", "    return pool[0];", "fleet", "calls land on all three"),
 ("a dead endpoint not skipped", "src/fleet.ts", ['    const usable = candidates.filter((e) => e.state !== "dead");', '(e.state === "live" ? 0 : 1)'], ["    const usable = candidates;", "0"], "fleet", "killed mid-load"),
 ("host names never re-resolved", "src/fleet.ts", "      if (g.resolvedAt === Infinity || (!force && now - g.resolvedAt < this.options.resolveIntervalMs)) {", "      if (g.resolvedAt === Infinity || g.endpoints.size > 0) {", "fleet", "re-resolution"),
 ("sessions spread like other calls", "src/fleet.ts", "    const target = this.sessionTarget(opts.sessionId, all);\n    return target === undefined ? [] : [target];", "    return all;", "fleet", "a session's calls"),
 ("symlinked directories followed when saving", "src/result.ts", "  if (st.isSymbolicLink() || !st.isDirectory()) {", "  if (false) {", "methods", "artifacts"),
 ("'..' allowed in artifact paths", "src/result.ts", '    if (p === "" || p === "." || p === "..") {', '    if (p === "") {', "unit", "saveTo refuses"),
 ("TLS certificate not verified", "src/connection.ts", "    const sock = tls.connect({ ...opts.tls, host: address.host, port: address.port, servername });", "    const sock = tls.connect({ ...opts.tls, host: address.host, port: address.port, servername, rejectUnauthorized: false });", "tls", "refused either way"),
 ("TLS client certificate never sent", "src/connection.ts", "    const sock = tls.connect({ ...opts.tls, host: address.host, port: address.port, servername });", "    const sock = tls.connect({ ...opts.tls, cert: undefined, key: undefined, host: address.host, port: address.port, servername });", "tls", "by name"),
 ("generated code edited by hand", "src/gen/sandbox_pb.ts", "// @generated from file sandbox.proto", "// @generated from file sandbox.proto (edited)", "unit", "generated code"),
 ("killed_by of a newer server crashes", "src/result.ts", "  return KILLED_BY[value] ?? `killed_by_${value}`;", "  const n = KILLED_BY[value]; if (n === undefined) throw new Error('bad killed_by'); return n;", "unit", "killed_by"),
 ("an abandoned call said to have not run", "src/client.ts", "        details(false, err.sent),", "        details(false, false),", "faults", "AbortSignal"),
 # streams (src/stream.ts and the stream calls of src/client.ts)
 ("a watch sent wherever the fleet picks, not where its start went", "src/client.ts", "      replyTimeoutMs: waitMs + this.settings.replyMarginMs,\n      endpoint,\n", "      replyTimeoutMs: waitMs + this.settings.replyMarginMs,\n", "stream", "a fleet"),
 ("a cancel sent wherever the fleet picks", "src/client.ts", "      replyTimeoutMs: SERVER_CANCEL_WAIT_MS + this.settings.replyMarginMs,\n      endpoint,\n", "      replyTimeoutMs: SERVER_CANCEL_WAIT_MS + this.settings.replyMarginMs,\n", "stream", "a fleet"),
 ("a watch awaited only its wait_ms's margin", "src/client.ts", "      replyTimeoutMs: waitMs + this.settings.replyMarginMs,", "      replyTimeoutMs: this.settings.replyMarginMs,", "stream", "awaited longer"),
 ("the AbortSignal not listened to", "src/stream.ts", '      signal?.addEventListener("abort", this.onAbort, { once: true });', "", "stream", "AbortSignal"),
 ("CancelRun sent on every cancel()", "src/stream.ts", "    if (this.cancelling === null) {", "    if (true) {", "stream", "AbortSignal"),
 ("leaving a for await early does not cancel", "src/stream.ts", "      await this.cancel().catch(() => {", "      await Promise.resolve().catch(() => {", "stream", "for await early"),
 ("an overlapping reply repeated", "src/stream.ts", "data: start >= have ? data : data.subarray(have - start) }", "data }", "unit", "overlapping"),
 ("text decoded chunk by chunk (no stream mode)", "src/stream.ts", "decode(r.value.data, { stream: true })", "decode(r.value.data)", "stream", "decodes a character split"),
 ("killed_by cancelled not named", "src/result.ts", '"signal", "cancelled"];', '"signal"];', "stream", "runCode is cancelled"),
 ("a failed outcome ends the iteration quietly", "src/stream.ts", "          throw this.failure;", "          return DONE;", "stream", "while queued"),
 ("an outcome's status not mapped to its error class", "src/client.ts", "    throw errorFor(w.status, w.message, { fromServer: true, mayHaveRun: false, endpoint, attempts });", "    throw errorFor(Code.UNKNOWN, w.message, { fromServer: true, mayHaveRun: false, endpoint, attempts });", "stream", "while queued"),
 ("a watch refused for --max-watchers ends the stream", "src/client.ts", "        if (!(e.fromServer && e.code === Code.RESOURCE_EXHAUSTED && wait > 0)) {", "        if (true) {", "stream", "max-watchers"),
 # API keys (test/tenants.test.ts)
 ("UNAUTHENTICATED retried", "src/client.ts", "new Set([Code.RESOURCE_EXHAUSTED, Code.UNAVAILABLE])", "new Set([Code.RESOURCE_EXHAUSTED, Code.UNAVAILABLE, Code.UNAUTHENTICATED])", "tenants", "a key works"),
 ("the key not sent", "src/client.ts", "          credential: this.#apiKey,", "          credential: \"\",", "tenants", "a key works"),
 ("session pins shared by every client", "src/fleet.ts", ["  private readonly sessionPins = new Map<string, string>();", "const MAX_SESSION_PINS = 10000;"], ["  private readonly sessionPins = SHARED_PINS;", "const MAX_SESSION_PINS = 10000;\nconst SHARED_PINS = new Map<string, string>();"], "tenants", "a fleet"),
 ("$SANDBOX_API_KEY ignored", "src/credential.ts", "    key = env[API_KEY_ENV] ?? \"\";", "    key = \"\";", "tenants", "SANDBOX_API_KEY"),
 ("a bad key sent", "src/credential.ts", "  const n = key.length; // UTF-16 units: each is at least one byte\n", "  const n = key.length; // UTF-16 units: each is at least one byte\n  return;\n", "tenants", "a bad key"),
 ("the key in a public field", "src/client.ts", ["  readonly #apiKey: string;", "this.#apiKey = apiKeyFrom", "credential: this.#apiKey"], ["  readonly apiKeyShown: string;", "this.apiKeyShown = apiKeyFrom", "credential: this.apiKeyShown"], "tenants", "a bad key"),
 ("CancelRun sent before StartRun answered", "src/stream.ts", "      await this.started;\n    } catch {\n      return; // it never started", "      void this.started;\n    } catch {\n      return; // it never started", "unit", "StartRun is on its way"),
]
only = sys.argv[1:] 
for i, (what, f, old, new, group, name) in enumerate(breaks):
    if only and str(i) not in only: continue
    p = f"{ROOT}/{f}"
    src = open(p).read()
    olds, news = (old, new) if isinstance(old, list) else ([old], [new])
    out = src
    for o, n in zip(olds, news):
        assert out.count(o) == 1, (what, o)
        out = out.replace(o, n)
    open(p, "w").write(out)
    try:
        r = subprocess.run(["npx", "tsc", "-p", "tsconfig.json"], cwd=ROOT, capture_output=True, text=True)
        if r.returncode != 0:
            print(f"[{i}] {what}: tsc failed: {r.stdout[-500:]}"); continue
        pat = [] if group == "fleet" else ["--test-name-pattern", name]
        r = subprocess.run(["node", "--test", *pat, f"dist/test/{group}.test.js"], cwd=ROOT, capture_output=True, text=True, timeout=300,
                           env={**os.environ, "SANDBOXD_BIN_DIR": BIN})
        fails = re.findall(r"^not ok \d+ - (.*)$", r.stdout, re.M)
        err = re.findall(r"^  error: (.*)$", r.stdout, re.M)
        print(f"[{i}] {what} -> {group}: {'FAILED' if r.returncode else 'still passes!'}: {fails} {err[:1]}", flush=True)
    finally:
        open(p, "w").write(src)
subprocess.run(["npx", "tsc", "-p", "tsconfig.json"], cwd=ROOT)
