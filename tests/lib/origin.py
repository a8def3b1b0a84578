"""A tiny HTTP origin on 127.0.0.1 for the tests of runs' network
(docs/EGRESS.md): every GET is answered 200 with one fixed body. Serves
from a thread of the test's process; nothing mocks the server under test.

    with serving(b"hello") as port: ...    # or start()/.shutdown()
"""
import contextlib
import http.server
import threading


def start(body):
    """A running server answering every GET with body; its port is
    server_address[1]. Stop it with shutdown() and server_close()."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


@contextlib.contextmanager
def serving(body):
    """start(body) for a with block: yields the port, stops it after."""
    httpd = start(body)
    try:
        yield httpd.server_address[1]
    finally:
        httpd.shutdown()
        httpd.server_close()
