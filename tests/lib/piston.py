"""Speaking the Piston API v2 to sandboxd's front (--http-fronts piston), for
the tests (tests/fronts/piston, the breakout suite's Piston pass) and
bench/fronts.py: one request, the way a learning platform's provider reads
the answer, and the answer put back into sandbox-run's --json shape so a
check written for the native client reads it unchanged.
"""
import http.client
import json
import signal

# How a learning platform's provider classifies a Piston run: by status and
# signal only (what real Piston, on isolate, gives it). A memory kill is
# the OOM killer's SIGKILL: status SG with signal SIGKILL.
def classify(run):
    status, sig = run.get("status"), run.get("signal")
    if status == "TO":
        return "timeout"
    if status in ("OL", "EL"):
        return "output-limit"
    if status == "SG" and sig == "SIGKILL":
        return "memory"
    if sig:
        return "signal"
    if status == "XX":
        return "internal"
    return "error" if run.get("code") not in (0, None) else "ok"


def request(port, method, path, body=None, headers=None, timeout=120):
    """One request on its own connection: (status, headers, raw body); status
    None (and the error as body) when the connection failed."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
            headers = {"Content-Type": "application/json", **(headers or {})}
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    except (OSError, http.client.HTTPException) as e:
        return None, {}, repr(e).encode()
    finally:
        c.close()


def execute(port, body, timeout=120):
    """POST /api/v2/execute: (HTTP status, the parsed answer or {"raw": ...})."""
    st, h, raw = request(port, "POST", "/api/v2/execute", body, timeout=timeout)
    try:
        return st, json.loads(raw)
    except ValueError:
        return st, {"raw": raw[-2000:].decode(errors="replace")}


def program(code, **fields):
    """A request body running code as the one file, plus Piston's fields."""
    return {"language": "python", "version": "*", "files": [{"content": code}], **fields}


def killed_by(run):
    """sandboxd's killed_by read back from a Piston run (the message tells a
    memory kill from a program that sent itself SIGKILL)."""
    status = run.get("status")
    if status == "TO":
        return "timeout"
    if status in ("OL", "EL"):
        return "output_limit"
    if status == "SG" and "out of memory" in (run.get("message") or ""):
        return "memory"
    if status == "SG":
        return "signal"
    return "none"


def as_sandbox_run(st, reply):
    """The answer in sandbox-run --json's shape: status OK with the run's
    figures, or INVALID_ARGUMENT (400) / the HTTP status with error."""
    if st == 200 and isinstance(reply.get("run"), dict) and reply["run"].get("status") != "XX":
        run = reply["run"]
        sig = run.get("signal")
        return {"status": "OK", "stdout": run.get("stdout", ""), "stderr": run.get("stderr", ""),
                "killed_by": killed_by(run), "exit_code": run.get("code") or 0,
                "signal": signal.Signals[sig].value if sig in signal.Signals.__members__ else 0,
                "wall_time_ms": run.get("wall_time"), "cpu_time_ms": run.get("cpu_time"),
                "peak_memory_bytes": run.get("memory"), "via": "piston"}
    status = {400: "INVALID_ARGUMENT", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}.get(
        st, f"HTTP {st}")
    return {"status": status, "error": reply.get("message") or json.dumps(reply)[:2000],
            "via": "piston"}
