#!/usr/bin/python3
"""Writes the fuzzers' seed corpora. tests/fuzz/corpus/ (fuzz_request):
valid request envelopes for every method of sandbox.v1.Sandbox, using every
field of RunCodeRequest, plus a few near misses (NUL in a path, unknown
method). tests/fuzz/corpus_reply/ (fuzz_reply): RunCode reply envelopes, OK
with every field of RunCodeResponse (invalid UTF-8 output, artifacts with
odd names), and error statuses; WatchRun reply envelopes (a chunk, complete
with a result, complete with a refusal). The protobuf wire format is encoded by hand
(no protobuf package needed):
    /usr/bin/python3 tests/fuzz/make_corpus.py
"""
import os
import sys


def varint(n):
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field_varint(num, value):
    return varint(num << 3 | 0) + varint(value)


def field_bytes(num, data):
    if isinstance(data, str):
        data = data.encode()
    return varint(num << 3 | 2) + varint(len(data)) + data


def envelope(method, payload, request_id="seed", deadline=0):
    out = field_bytes(1, "/sandbox.v1.Sandbox/" + method) + field_bytes(2, request_id)
    if deadline:
        out += field_varint(3, deadline)
    return out + field_bytes(4, payload)


def file_msg(path, content=None, url=None):
    out = field_bytes(1, path)
    if url is not None:
        return out + field_bytes(3, url)
    return out + field_bytes(2, content or b"")


def limits(*values):
    return b"".join(field_varint(i + 1, v) for i, v in enumerate(values) if v)


def run_code(code, requirements=(), files=(), run_id="", session_id="", stdin=b"", args=(),
             env=(), lim=None, runtime=""):
    out = field_bytes(1, code)
    for r in requirements:
        out += field_bytes(2, r)
    for f in files:
        out += field_bytes(3, f)
    if run_id:
        out += field_bytes(4, run_id)
    if session_id:
        out += field_bytes(5, session_id)
    if stdin:
        out += field_bytes(6, stdin)
    for a in args:
        out += field_bytes(7, a)
    for k, v in env:
        out += field_bytes(8, field_bytes(1, k) + field_bytes(2, v))
    if lim is not None:
        out += field_bytes(9, lim)
    if runtime:
        out += field_bytes(10, runtime)
    return out


SEEDS = {
    "run_hello": envelope("RunCode", run_code('print("hello")\n')),
    "run_all_fields": envelope("RunCode", run_code(
        "import sys\nprint(sys.argv, open('mounts/d/f.txt').read())\n",
        requirements=["numpy>=1.20", "requests[socks]==2.31.0; python_version >= '3.8'"],
        files=[file_msg("d/f.txt", b"content"), file_msg("web/x.csv", url="https://example.com/x")],
        run_id="run-1", session_id="sess.1", stdin=b"input\n", args=["a", "b c"],
        env=[("KEY", "value"), ("MPLBACKEND", "Agg")],
        lim=limits(2000, 1000, 64 << 20, 4096, 16, 8 << 20), runtime="python"),
        deadline=1700000000000),
    "run_session": envelope("RunCode", run_code("open('x','w').write('1')\n", session_id="s1")),
    "run_limits_negative": envelope("RunCode", run_code("1", lim=limits(-1, -1, -1, -1, -1, -1))),
    "run_bad_path": envelope("RunCode", run_code("1", files=[file_msg("../etc/x", b"x")])),
    "run_nul_path": envelope("RunCode", run_code("1", files=[file_msg("a\0/../../x", b"x")])),
    "run_requirement_option": envelope("RunCode", run_code("1", requirements=["-e git+x"])),
    "health": envelope("Health", b""),
    "get_info": envelope("GetInfo", b""),
    "close_session": envelope("CloseSession", field_bytes(1, "s1")),
    "list_files": envelope("ListFiles", field_bytes(1, "s1") + field_bytes(2, "output/sub")),
    "read_file": envelope("ReadFile", field_bytes(1, "s1") + field_bytes(2, "output/a.txt")
                          + field_varint(3, 10) + field_varint(4, 100)),
    "unknown_method": envelope("Nope", b""),
}


def reply(status, payload=b"", message=""):
    out = field_varint(1, status) if status else b""
    if message:
        out += field_bytes(2, message)
    return out + field_bytes(3, "seed") + field_bytes(4, payload)


def artifact(name, rel, content=b"", mime="text/plain", omitted=False):
    out = field_bytes(1, name) + field_bytes(2, rel) + field_varint(3, len(content))
    out += field_bytes(4, mime) + field_bytes(5, content)
    return out + (field_varint(6, 1) if omitted else b"")


def run_response(stdout=b"", stderr=b"", killed_by=0, exit_code=0, artifacts=(), feedback=()):
    out = field_bytes(1, "run-1") + field_bytes(2, "sess") + field_bytes(3, stdout)
    out += field_bytes(4, stderr) + field_varint(5, 1) + field_varint(7, killed_by)
    out += field_varint(8, exit_code) + field_varint(9, 9) + field_varint(10, 12)
    out += field_varint(11, 10) + field_varint(12, 4 << 20)
    for a in artifacts:
        out += field_bytes(13, a)
    for f in feedback:
        out += field_bytes(14, f)
    return out + field_varint(15, 1)


REPLY_SEEDS = {
    "ok_hello": reply(0, run_response(b"hello\n")),
    "ok_all_fields": reply(0, run_response(
        b"bytes \xff\xfe\x00 \xed\xa0\x80 \xf4\x90\x80\x80\n", b"\x1b[31merr\x7f",
        killed_by=2, exit_code=-1,
        artifacts=[artifact("a.png", "plots/a.png", b"\x89PNG\r\n", "image/png"),
                   artifact("..", "../../etc/passwd", b"x"),
                   artifact("big", "big", omitted=True)],
        feedback=["memory limit of 128 MiB reached", "output \u00e9 \U0001f600"])),
    "invalid_argument": reply(3, message="limits.timeout_ms: must be at most 60000"),
    "failed_precondition_bad_utf8": reply(9, message=b"download failed: \xc3\x28"),
    "ok_bad_payload": reply(0, b"\x0a\xff\xff\xff\xff\x0f"),
    # WatchRunResponse: state 1, stdout 2, stderr 3, offsets 4 and 5, truncated 6 and 7,
    # complete 8, status 9, message 10, result 11.
    "watch_chunk": reply(0, field_varint(1, 2) + field_bytes(2, b"caf\xc3") + field_bytes(3, "e")
                         + field_varint(4, 10) + field_varint(5, 3)),
    "watch_complete": reply(0, field_varint(1, 3) + field_varint(6, 1) + field_varint(8, 1)
                            + field_bytes(11, run_response(b"ok\n", killed_by=5, exit_code=-1))),
    "watch_complete_cancelled": reply(0, field_varint(1, 3) + field_varint(8, 1)
                                      + field_varint(9, 1) + field_bytes(10, "cancelled; nothing ran")),
    "watch_not_found": reply(5, message="run_id: no such run here"),
}


# fuzz_artifacts: programs of (op, name selector, args) bytes; see
# fuzz_artifacts.c. Names below 200 pick from its alphabet:
# 0 a, 1 b, 2 c.png, 3 d.txt, 4 e, 5 .., 6 ., 7 "f g", 8 "h\nx", 9 \xff\xfe, 10 dir, 11 loop.
ARTIFACT_SEEDS = {
    "files_and_dirs": bytes([0, 10, 6, 10, 1, 2, 40, 1, 3, 10, 8, 0, 1, 4, 200]),
    "symlinks_out": bytes([2, 0, 0, 2, 1, 1, 2, 11, 4, 2, 4, 0, 1, 3, 5]),
    "fifo_socket_link": bytes([3, 0, 4, 1, 1, 3, 9, 5, 4, 3]),
    "odd_names": bytes([1, 7, 3, 1, 8, 3, 1, 9, 3, 1, 205, 0xc3, 0x28, 0xe2, 0x82, 0x41, 3]),
    "deep": bytes([0, 10, 6, 10] * 10 + [1, 3, 50]),
    "unreadable": bytes([1, 3, 90, 7, 3, 0, 10, 7, 10]),
}


def write(out_dir, seeds):
    os.makedirs(out_dir, exist_ok=True)
    for name, data in seeds.items():
        with open(os.path.join(out_dir, name), "wb") as f:
            f.write(data if isinstance(data, bytes) else data.encode("utf-8", "surrogateescape"))
    print(f"{len(seeds)} seeds in {out_dir}")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    write(os.path.join(here, "corpus"), SEEDS)
    write(os.path.join(here, "corpus_reply"), REPLY_SEEDS)
    write(os.path.join(here, "corpus_artifacts"), ARTIFACT_SEEDS)


if __name__ == "__main__":
    main()
