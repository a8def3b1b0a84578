"""tests/lib/dns_server.py's own tests (ctest harness_selftest): questions
sent over UDP as a resolver sends them, the replies read back: A and AAAA
from the dict (each family its own), NXDOMAIN, case and trailing dots, the
query counts, records changed while it runs."""
import os
import socket
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from lib.dns_server import DnsServer  # noqa: E402


def ask(port, name, qtype, qid=0x1234):
    q = struct.pack("!HHHHHH", qid, 0x0100, 1, 0, 0, 0)
    q += b"".join(bytes([len(label)]) + label.encode() for label in name.split(".") if label)
    q += b"\0" + struct.pack("!HH", qtype, 1)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(5)
        s.sendto(q, ("127.0.0.1", port))
        r = s.recv(4096)
    rid, flags, qd, an = struct.unpack("!HHHH", r[:8])
    assert rid == qid and flags & 0x8000 and qd == 1
    off = len(q)
    assert r[12:off] == q[12:]  # the question, echoed
    addrs = []
    for _ in range(an):
        ptr, rtype, rclass, _ttl, rdlen = struct.unpack("!HHHIH", r[off:off + 12])
        assert ptr == 0xC00C and rtype == qtype and rclass == 1
        family = socket.AF_INET if rtype == 1 else socket.AF_INET6
        addrs.append(socket.inet_ntop(family, r[off + 12:off + 12 + rdlen]))
        off += 12 + rdlen
    assert off == len(r)
    return flags & 0xF, addrs


def test_answers_from_the_dict():
    records = {"a.test": ["127.0.0.1", "::1", "10.0.0.2"], "v6.test": ["2001:db8::1"]}
    with DnsServer(records) as dns:
        assert ask(dns.port, "a.test", 1) == (0, ["127.0.0.1", "10.0.0.2"])
        assert ask(dns.port, "A.Test.", 28) == (0, ["::1"])
        assert ask(dns.port, "v6.test", 1) == (0, [])
        assert ask(dns.port, "nope.test", 1) == (3, [])
        assert ask(dns.port, "a.test", 16) == (0, [])  # TXT: nothing
        assert dns.queries["a.test"] == 3
        assert dns.asked("a.test", "A") == 1
        assert dns.asked("a.test", "AAAA") == 1
        assert dns.asked("nope.test", "A") == 1
        records["a.test"] = ["192.0.2.9"]
        assert ask(dns.port, "a.test", 1) == (0, ["192.0.2.9"])
        assert dns.asked("a.test", "A") == 2
