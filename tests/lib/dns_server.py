#!/usr/bin/python3
"""A tiny DNS server for the tests (stdlib only): UDP on 127.0.0.1, a port
of its own, answering A and AAAA questions from a dict, for sandboxd's
`--egress-dns 127.0.0.1:PORT` (the egress proxy's resolver, egress_dns.c).

    dns = DnsServer({"a.test": ["127.0.0.1", "::1"], "b.test": ["10.0.0.2"]})
    dns.start()            # 127.0.0.1, port 0: dns.port
    ...                    # sandboxd --egress-dns 127.0.0.1:%d % dns.port
    dns.queries["a.test"]  # questions asked about a.test, any type
    dns.asked("a.test", "A")
    dns.stop()

Names match without regard to case or a trailing dot. A known name gets
the addresses of the asked family only (A: IPv4, AAAA: IPv6; none of that
family: NOERROR with no answer); an unknown name gets NXDOMAIN; other
question types an empty NOERROR. The records dict is read at each question,
so a test may change it while the server runs (a name that resolves
differently the second time). sandboxd asks A and AAAA once per
connection (and again only after half its time limit without an answer),
so "resolved once" reads asked(name, "A") == 1.
"""
import collections
import ipaddress
import socket
import struct
import threading

TYPES = {1: "A", 28: "AAAA"}


class DnsServer:
    def __init__(self, records, ttl=60):
        self.records = records
        self.ttl = ttl
        self.queries = collections.Counter()  # name -> questions, any type
        self.by_type = collections.Counter()  # (name, "A"/"AAAA"/number) -> questions
        self.port = None
        self._sock = None
        self._thread = None
        self._stop = threading.Event()
        self._lock = threading.Lock()

    def start(self):
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.settimeout(0.1)
        self.port = self._sock.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, name="dns_server", daemon=True)
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._sock is not None:
            self._sock.close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def asked(self, name, qtype):
        """Questions of type qtype ("A", "AAAA") about name so far."""
        with self._lock:
            return self.by_type[(_norm(name), qtype)]

    def _serve(self):
        while not self._stop.is_set():
            try:
                data, peer = self._sock.recvfrom(4096)
            except socket.timeout:
                continue
            except OSError:
                return
            reply = self.answer(data)
            if reply is not None:
                self._sock.sendto(reply, peer)

    def answer(self, query):
        """The reply to one query's bytes, or None for what is not one."""
        if len(query) < 12:
            return None
        qid, flags, qdcount = struct.unpack("!HHH", query[:6])
        if flags & 0x8000 or qdcount != 1:
            return None
        labels, off = [], 12
        while True:
            if off >= len(query):
                return None
            n = query[off]
            off += 1
            if n == 0:
                break
            if n > 63 or off + n > len(query):
                return None
            labels.append(query[off:off + n].decode("ascii", "replace"))
            off += n
        if off + 4 > len(query):
            return None
        qtype, qclass = struct.unpack("!HH", query[off:off + 4])
        question = query[12:off + 4]
        name = _norm(".".join(labels))
        with self._lock:
            self.queries[name] += 1
            self.by_type[(name, TYPES.get(qtype, qtype))] += 1
        known = {_norm(k): v for k, v in self.records.items()}
        rcode, answers = 0, []
        if name not in known:
            rcode = 3  # NXDOMAIN
        elif qclass == 1 and qtype in TYPES:
            for text in known[name]:
                addr = ipaddress.ip_address(text)
                if (addr.version == 4) == (qtype == 1):
                    answers.append(addr.packed)
        rd = flags & 0x0100
        header = struct.pack("!HHHHHH", qid, 0x8000 | 0x0400 | rd | 0x0080 | rcode, 1,
                             len(answers), 0, 0)
        body = b"".join(struct.pack("!HHHIH", 0xC00C, qtype, 1, self.ttl, len(a)) + a
                        for a in answers)
        return header + question + body


def _norm(name):
    return name.lower().rstrip(".")
