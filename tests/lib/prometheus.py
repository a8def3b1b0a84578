"""The Prometheus side of the operations tests (tests/integration/service:
test_ops.py, test_https.py): parse_metrics reads the text exposition back
(samples by name and labels, HELP, TYPE, the lines that do not parse), and
start_prometheus runs a real Prometheus server (Debian's /usr/bin/prometheus)
scraping a sandboxd's /metrics, queried with wait_query_sum.
"""
import json
import os
import re
import shutil
import subprocess
import time
import urllib.parse
import urllib.request

from .harness import FAILURES, free_port

LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')


class Metrics:
    """The exposition as read back: samples by (name, labels), HELP, TYPE."""

    def __init__(self):
        self.samples = {}
        self.help = {}
        self.type = {}
        self.bad_lines = []

    def get(self, name, **labels):
        return self.samples.get((name, frozenset(labels.items())))

    def family_of(self, name):
        for suffix in ("_bucket", "_sum", "_count"):
            base = name[:-len(suffix)]
            if name.endswith(suffix) and self.type.get(base) == "histogram":
                return base
        return name


def unescape(v):
    return re.sub(r'\\(.)', lambda m: "\n" if m.group(1) == "n" else m.group(1), v)


def parse_metrics(text):
    m = Metrics()
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name, _, help_text = line[7:].partition(" ")
            m.help[name] = help_text
        elif line.startswith("# TYPE "):
            name, _, kind = line[7:].partition(" ")
            m.type[name] = kind
        elif line and not line.startswith("#"):
            s = SAMPLE.match(line)
            if not s:
                m.bad_lines.append(line)
                continue
            labels = frozenset((k, unescape(v)) for k, v in LABEL.findall(s.group(2) or ""))
            m.samples[(s.group(1), labels)] = float(s.group(3))
    return m


def start_prometheus(tmp, target_port, tls=None):
    """A Prometheus server scraping 127.0.0.1:target_port every second;
    tls: its tls_config (ca_file, cert_file, ...) to scrape over https."""
    port = free_port()
    config = os.path.join(tmp, "prometheus.yml")
    scheme = ""
    if tls is not None:
        scheme = "    scheme: https\n    tls_config:\n" + "".join(
            f"      {k}: {v}\n" for k, v in tls.items())
    with open(config, "w") as f:
        f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                "scrape_configs:\n  - job_name: sandboxd\n" + scheme + "    static_configs:\n"
                f"      - targets: ['127.0.0.1:{target_port}']\n")
    log = open(os.path.join(tmp, "prometheus.log"), "wb")
    proc = subprocess.Popen(["/usr/bin/prometheus", f"--config.file={config}",
                             f"--storage.tsdb.path={os.path.join(tmp, 'tsdb')}",
                             f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=log, stderr=subprocess.STDOUT)
    return proc, port


def stop_prometheus(prom, tmp):
    """Stops it (when started), shows its log after a failure, removes tmp."""
    if prom is not None:
        prom.terminate()
        try:
            prom.wait(20)
        except subprocess.TimeoutExpired:
            prom.kill()
            prom.wait()
        if FAILURES:
            print(open(os.path.join(tmp, "prometheus.log"), errors="replace").read()[-3000:])
    shutil.rmtree(tmp, ignore_errors=True)


def prom_query(port, query):
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": query})
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read())


def wait_query_sum(port, query, want, timeout=60):
    """Sums the query's vector until it equals want; the last sum seen."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            res = prom_query(port, query)
            if res.get("status") == "success" and res["data"]["result"]:
                last = sum(float(r["value"][1]) for r in res["data"]["result"])
                if last == want:
                    return last
        except OSError:
            pass  # not listening yet
        time.sleep(0.5)
    return last
