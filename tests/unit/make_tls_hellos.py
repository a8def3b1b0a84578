#!/usr/bin/python3
"""Captures real TLS ClientHellos for the SNI parser's tests (egress_tls.c)
and writes them as C arrays to tests/unit/tls_hellos.h and as seeds to
tests/fuzz/corpus_egress_tls/: one from `openssl s_client -servername
a.test`, one from Python's ssl with server_hostname="a.test", one from
Python's ssl without a server name. A listener on 127.0.0.1 reads the
first record and closes; nothing leaves the machine. Run it again only to
refresh them (the bytes change each time: random, key shares):
    /usr/bin/python3 tests/unit/make_tls_hellos.py
"""
import os
import socket
import ssl
import subprocess
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def first_record(listener):
    conn, _ = listener.accept()
    conn.settimeout(5)
    data = b""
    with conn:
        while len(data) < 5 or len(data) < 5 + int.from_bytes(data[3:5], "big"):
            chunk = conn.recv(65536)
            if not chunk:
                break
            data += chunk
    assert data[0] == 22 and len(data) == 5 + int.from_bytes(data[3:5], "big"), data[:16]
    return data


def openssl_hello(listener):
    port = listener.getsockname()[1]
    proc = subprocess.Popen(
        ["openssl", "s_client", "-connect", f"127.0.0.1:{port}", "-servername", "a.test"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    data = first_record(listener)
    proc.wait(timeout=10)
    return data


def python_hello(listener, server_hostname):
    port = listener.getsockname()[1]

    def client():
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
                ctx.wrap_socket(sock, server_hostname=server_hostname)
        except (OSError, ssl.SSLError):
            pass  # the listener hangs up after the hello

    thread = threading.Thread(target=client)
    thread.start()
    data = first_record(listener)
    thread.join()
    return data


def c_array(name, data, comment):
    lines = [f"/* {comment} */", f"static const uint8_t {name}[{len(data)}] = {{"]
    for i in range(0, len(data), 16):
        lines.append("    " + " ".join(f"0x{b:02x}," for b in data[i:i + 16]))
    lines.append("};")
    return "\n".join(lines)


def main():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    with listener:
        hellos = [
            ("hello_openssl", openssl_hello(listener),
             "openssl s_client -connect 127.0.0.1:PORT -servername a.test"),
            ("hello_python", python_hello(listener, "a.test"),
             "Python ssl, wrap_socket(server_hostname=\"a.test\")"),
            ("hello_python_no_sni", python_hello(listener, None),
             "Python ssl, wrap_socket(server_hostname=None): no server_name"),
        ]
    header = ["/* tls_hellos.h: real ClientHellos, each one handshake record, captured",
              " * on 127.0.0.1 by tests/unit/make_tls_hellos.py (which wrote this file;",
              " * run it again to refresh). For tests/unit/test_egress_tls.c. */",
              "#ifndef SBX_TEST_TLS_HELLOS_H", "#define SBX_TEST_TLS_HELLOS_H", "",
              "#include <stdint.h>", "", ""]
    body = "\n\n".join(c_array(name, data, comment) for name, data, comment in hellos)
    with open(os.path.join(HERE, "tls_hellos.h"), "w") as out:
        out.write("\n".join(header) + body + "\n\n#endif\n")
    corpus = os.path.join(ROOT, "tests", "fuzz", "corpus_egress_tls")
    os.makedirs(corpus, exist_ok=True)
    for name, data, _ in hellos:
        with open(os.path.join(corpus, name.replace("hello_", "")), "wb") as out:
            out.write(data)
    # The openssl hello again, its handshake message split over two records.
    data = hellos[0][1]
    msg = data[5:]
    cut = len(msg) // 2
    split = data[:3] + cut.to_bytes(2, "big") + msg[:cut] + data[:3] + \
        (len(msg) - cut).to_bytes(2, "big") + msg[cut:]
    with open(os.path.join(corpus, "openssl_two_records"), "wb") as out:
        out.write(split)
    for name, data, _ in hellos:
        print(f"{name}: {len(data)} bytes")


if __name__ == "__main__":
    main()
