#!/usr/bin/python3
"""Writes the fuzzer's seed corpus (tests/fuzz/corpus/): valid request
envelopes for every method of sandbox.v1.Sandbox, using every field of
RunCodeRequest, plus a few near misses (NUL in a path, unknown method).
The protobuf wire format is encoded by hand (no protobuf package needed):
    /usr/bin/python3 tests/fuzz/make_corpus.py tests/fuzz/corpus
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


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__),
                                                                 "corpus")
    os.makedirs(out_dir, exist_ok=True)
    for name, data in SEEDS.items():
        with open(os.path.join(out_dir, name), "wb") as f:
            f.write(data)
    print(f"{len(SEEDS)} seeds in {out_dir}")


if __name__ == "__main__":
    main()
