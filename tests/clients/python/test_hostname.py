"""A host name that resolves to several addresses (a Kubernetes headless
Service) counts as one endpoint per address, looked up again over time.

Here "localhost" resolves to 127.0.0.1 only (/etc/hosts), so the client runs
in a private mount namespace (unshare --mount --propagation private) where
/etc/hosts is a bind mount of a file this test writes; nothing outside that
process sees it. Two servers listen on the same port, one on 127.0.0.1 and
one on ::1; the file first names only 127.0.0.1, then both, then only ::1,
and the client follows."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import runs_of

NAME = "sbx-pyclient-fleet.test"

CHILD = textwrap.dedent('''
    import json, os, sys, time
    import sandboxd

    hosts, port, name = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    # Refuse to go on unless /etc/hosts here is the test's file.
    if os.stat("/etc/hosts").st_ino != os.stat(hosts).st_ino:
        sys.exit("/etc/hosts is not the test's bind mount")

    def write(*addresses):
        with open(hosts, "w") as f:  # in place: the bind mount keeps the inode
            f.write("".join(f"{a} {name}\\n" for a in addresses))

    def settle(client, want):
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            client.health()  # a call looks the name up again once due
            eps = client.endpoints()
            if sorted(eps) == sorted(want) and all(eps.values()):
                return True
            time.sleep(0.1)
        return False

    out = {}
    v4, v6 = f"tcp://127.0.0.1:{port}", f"tcp://[::1]:{port}"
    write("127.0.0.1")
    with sandboxd.Client(f"tcp://{name}:{port}", resolve_interval_s=0.3) as c:
        out["one"] = settle(c, [v4])
        out["one_runs"] = [c.run_code("print(1)", run_id=f"host-a-{i}").endpoint
                           for i in range(2)]
        write("127.0.0.1", "::1")
        out["both"] = settle(c, [v4, v6])
        out["both_runs"] = [c.run_code("print(1)", run_id=f"host-b-{i}").endpoint
                            for i in range(6)]
        write("::1")
        out["six"] = settle(c, [v6])
        out["six_runs"] = [c.run_code("print(1)", run_id=f"host-c-{i}").endpoint
                           for i in range(2)]
    print(json.dumps(out))
''')


def test_one_endpoint_per_address_and_re_resolution(servers, tmp_path):
    v4 = servers.start("--workers", "1")
    port = v4.port
    try:
        v6 = servers.start("--workers", "1", "--listen", f"tcp://[::1]:{port}")
    except RuntimeError as e:
        pytest.fail(f"a server on [::1]:{port} (the port of 127.0.0.1's server): {e}")
    hosts = tmp_path / "hosts"
    hosts.write_text("")
    child = tmp_path / "child.py"
    child.write_text(CHILD)
    p = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c",
         'mount --bind "$1" /etc/hosts && exec "$2" "$3" "$1" "$4" "$5"', "sh",
         str(hosts), sys.executable, str(child), str(port), NAME],
        capture_output=True, text=True, timeout=120, env=dict(os.environ))
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout)
    a4, a6 = f"tcp://127.0.0.1:{port}", f"tcp://[::1]:{port}"
    assert out["one"] and set(out["one_runs"]) == {a4}, out
    assert out["both"] and set(out["both_runs"]) == {a4, a6}, out
    assert out["six"] and set(out["six_runs"]) == {a6}, out
    assert all(runs_of(v4, f"host-b-{i}") + runs_of(v6, f"host-b-{i}") == 1 for i in range(6))
    assert sum(runs_of(v6, f"host-b-{i}") for i in range(6)) == 3
    assert runs_of(v6, "host-c-0") == 1 and runs_of(v4, "host-c-0") == 0
    with open("/etc/hosts") as f:
        assert NAME not in f.read(), "the host's /etc/hosts was touched"
