"""The examples in examples/ run as a user runs them, against a real
sandboxd: each as its own process from a clean temporary directory, with
the server's URL as its argument, and its output checked for what the
example says it shows."""
import os
import subprocess
import sys

import pytest

from conftest import REPO


def run_example(path, *args, timeout=180):
    env = dict(os.environ)  # PYTHONPATH: the client, from the build (run_pytest.py)
    return subprocess.run([sys.executable, os.path.join(REPO, path), *args],
                          capture_output=True, text=True, timeout=timeout, env=env,
                          cwd=os.environ.get("TMPDIR", "/tmp"))


@pytest.fixture(scope="module")
def srv(module_servers):
    return module_servers.start("--workers", "1", "--max-interpreters", "2", "--zygote")


@pytest.mark.parametrize("runtime", ["python", "python-zygote"])
def test_notebook_session(srv, runtime):
    session = f"nb-example-{runtime}"
    p = run_example("examples/python/notebook.py", srv.tcp, "--runtime", runtime,
                    "--session", session)
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert "[1] result='4'" in out, out                      # the last expression's value
    assert "[2] result=\"('Cairo', 27)\"" in out, out        # cell 2 used cell 1's rows
    assert "stdout='wrote temps.csv with 4 rows\\n'" in out, out
    assert "figure-1.png: image/png" in out, out             # plt.show() came back
    assert "'temps.csv'" in out and "Cairo,27" in out, out   # the session's files
    # The session was closed at the end: its id is free, a new one starts empty.
    import sandboxd
    with sandboxd.Client(srv.tcp) as c:
        r = c.run_code("'rows' in dir()\n", session_id=session, session_mode="interpreter")
        assert r.session_created and r.result == "False"
        c.close_session(session)


def test_notebook_bad_url():
    p = run_example("examples/python/notebook.py", "tcp://127.0.0.1:1", timeout=120)
    assert p.returncode != 0 and p.stderr.strip(), (p.returncode, p.stdout, p.stderr)
