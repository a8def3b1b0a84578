"""The tests' shared library, imported as the package `lib`
(tests/pytest.ini puts tests/ on sys.path): harness (a real sandboxd per
test, the soft check, raw SP connections), uids (uid ranges no two tests
share), prometheus (the metrics parser and a real Prometheus), tls_certs,
wheelhouse, hostile_package, piston, mcp_stdio and
mutate. Nothing in it mocks the server.
"""
