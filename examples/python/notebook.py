#!/usr/bin/python3
"""A notebook-style session with the Python client (client/python).

An INTERPRETER session keeps its variables between calls, as a notebook
keeps them between cells: each call below is one cell, and each reply
carries the cell's output and the value of its last expression (`result`).
The session's files stay in its workspace (list_files, read_file), a
figure shown with plt.show() comes back as a PNG artifact, and the session
is closed at the end (its interpreter and files go).

    python3 examples/python/notebook.py [URL] [--runtime python-zygote]

URL defaults to the server's default, tcp://127.0.0.1:7878. It needs a
running sandboxd (README: the first set-up command) and the client
importable (README, "Install"). Run by ctest's clients_examples_python.
"""
import argparse
import sys

import sandboxd

CELLS = [
    # 1: data into the session's interpreter; the last line's value comes back.
    "rows = [('Oslo', 4), ('Rome', 18), ('Cairo', 27), ('Lima', 19)]\n"
    "len(rows)\n",
    # 2: uses what cell 1 defined.
    "warmest = max(rows, key=lambda r: r[1])\n"
    "warmest\n",
    # 3: a file in the session's workspace, and printed output.
    "import csv\n"
    "with open('temps.csv', 'w', newline='') as f:\n"
    "    csv.writer(f).writerows([('city', 'temp'), *rows])\n"
    "print('wrote temps.csv with', len(rows), 'rows')\n",
    # 4: a figure, shown as in a notebook: it comes back as an artifact.
    "import matplotlib.pyplot as plt\n"
    "plt.bar([c for c, _ in rows], [t for _, t in rows])\n"
    "plt.title('temperature')\n"
    "plt.show()\n",
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("url", nargs="?", default="tcp://127.0.0.1:7878")
    ap.add_argument("--runtime", default="python",
                    help="python, or python-zygote on a server started with --zygote (the "
                         "interpreter is then forked with numpy and matplotlib imported)")
    ap.add_argument("--session", default="notebook-example")
    a = ap.parse_args()
    with sandboxd.Client(a.url, timeout_s=120) as client:
        try:
            for n, code in enumerate(CELLS, 1):
                r = client.run_code(code, session_id=a.session, session_mode="interpreter",
                                    runtime=a.runtime)
                if not r.ok:
                    print(f"cell {n} failed (exit {r.exit_code}):\n{r.stderr_text}",
                          file=sys.stderr)
                    return 1
                print(f"[{n}] result={r.result!r} stdout={r.stdout_text!r} "
                      f"figures={[x.relative_path for x in r.artifacts]}")
                for art in r.artifacts:
                    print(f"    {art.relative_path}: {art.mime}, {art.size} bytes")
            names = sorted(e.relative_path for e in client.list_files(a.session))
            print(f"session files: {names}")
            csv_text = client.read_file(a.session, "temps.csv").content.decode()
            print(f"temps.csv:\n{csv_text}", end="")
        finally:
            client.close_session(a.session)
    return 0


if __name__ == "__main__":
    sys.exit(main())
