#!/usr/bin/python3
"""Certificates for the TLS tests, made by the openssl command line in a
directory the test owns: nothing is checked in, nothing outlives the test.

    make_certs(dir) -> dict of name -> path

  ca.crt             the mesh's CA (what --tls-ca and clients trust)
  server.crt/.key    the server, from ca: SAN DNS:localhost, DNS:127.0.0.1,
                     IP:127.0.0.1 (mbedTLS 2.28, Debian 12's, compares the
                     server name with the SAN's DNS names only, so the
                     address is there as a DNS name too; node:tls and
                     OpenSSL check the IP entry)
  server_ip_only.crt the same key, SAN IP:127.0.0.1 only (what mbedTLS 2.28
                     cannot match when dialing tls+tcp://127.0.0.1)
  server_localhost.crt the same key, SAN DNS:localhost only
  wrong_name.crt/.key a server certificate from ca for other.test only
  client.crt/.key    a client, from ca
  client.pem         client.crt and client.key in one file (the Python
                     client's cert_key_file)
  other_ca.crt       an unrelated CA
  other_client.crt/.key  a client from other_ca
  expired_client.crt/.key  a client from ca, valid 2020-01-01 to 2020-01-02
                     (openssl ca with -startdate/-enddate)
  spiffe_a.crt/.key  a client from ca, CN=workload-a, SAN
                     URI:spiffe://mesh.local/ns/a/sa/api (a mesh identity)
  cn_b.crt/.key      a client from ca, CN=b, no SAN
  forged_a.crt/.key  a client from other_ca with spiffe_a's URI SAN
  server_enc.key     server.key encrypted (AES-256-CBC, PEM), password in
  key_password.txt
  mismatch.key       a key that belongs to no certificate here

make_origin_certs(dir, names) -> dict, for the egress tests' HTTPS origins:
  origin_ca.crt      a CA of its own (what the sandboxed program trusts)
  origin.crt/.key    a server certificate from it for every DNS name in names

Also a command: `tls_certs.py DIR` makes them and prints the dict as JSON
(the TypeScript tests call it).
"""
import json
import os
import subprocess
import sys

EC = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
PASSWORD = "correct horse battery"
SPIFFE_A = "spiffe://mesh.local/ns/a/sa/api"


def _ossl(d, *args, stdin=None):
    subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True, input=stdin)


def _ca(d, name, cn):
    _ossl(d, "req", "-x509", *EC, "-keyout", f"{name}.key", "-out", f"{name}.crt", "-days", "3",
          "-subj", f"/CN={cn}", "-addext", "basicConstraints=critical,CA:TRUE",
          "-addext", "keyUsage=critical,keyCertSign,cRLSign")


def _leaf(d, name, ca, cn, ext, key=None):
    """A certificate signed by ca; a new key unless key names one."""
    with open(os.path.join(d, f"{name}.ext"), "w") as f:
        f.write(ext + "\n")
    if key is None:
        _ossl(d, "req", *EC, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={cn}")
    else:
        _ossl(d, "req", "-new", "-key", key, "-out", f"{name}.csr", "-subj", f"/CN={cn}")
    _ossl(d, "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key",
          "-CAcreateserial", "-out", f"{name}.crt", "-days", "3", "-extfile", f"{name}.ext")


def _expired(d, name, ca, cn):
    """A client certificate whose validity ended in 2020: openssl x509 has no
    way to set past dates in OpenSSL 3.0, openssl ca has -startdate/-enddate."""
    db = os.path.join(d, f"{name}-db")
    os.makedirs(db, exist_ok=True)
    open(os.path.join(db, "index.txt"), "w").close()
    with open(os.path.join(db, "serial"), "w") as f:
        f.write("1000\n")
    with open(os.path.join(d, f"{name}.cnf"), "w") as f:
        f.write(f"""[ca]
default_ca = test_ca
[test_ca]
database = {db}/index.txt
serial = {db}/serial
new_certs_dir = {db}
default_md = sha256
policy = anything
unique_subject = no
copy_extensions = none
x509_extensions = client_ext
[anything]
commonName = supplied
[client_ext]
basicConstraints = CA:FALSE
extendedKeyUsage = clientAuth
""")
    _ossl(d, "req", *EC, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={cn}")
    _ossl(d, "ca", "-batch", "-config", f"{name}.cnf", "-cert", f"{ca}.crt", "-keyfile",
          f"{ca}.key", "-in", f"{name}.csr", "-out", f"{name}.crt", "-notext",
          "-startdate", "20200101000000Z", "-enddate", "20200102000000Z")


def make_certs(d):
    server_ext = "basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"
    client_ext = "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth"
    _ca(d, "ca", "sandboxd test CA")
    _ca(d, "other_ca", "some other CA")
    _leaf(d, "server", "ca", "sandboxd test server",
          server_ext + "subjectAltName=DNS:localhost,DNS:127.0.0.1,IP:127.0.0.1")
    _leaf(d, "server_ip_only", "ca", "sandboxd test server",
          server_ext + "subjectAltName=IP:127.0.0.1", key="server.key")
    _leaf(d, "server_localhost", "ca", "sandboxd test server",
          server_ext + "subjectAltName=DNS:localhost", key="server.key")
    _leaf(d, "wrong_name", "ca", "other.test", server_ext + "subjectAltName=DNS:other.test")
    _leaf(d, "client", "ca", "tenant-a", client_ext)
    _leaf(d, "other_client", "other_ca", "intruder", client_ext)
    _expired(d, "expired_client", "ca", "tenant-expired")
    spiffe = client_ext + "\nsubjectAltName=URI:" + SPIFFE_A
    _leaf(d, "spiffe_a", "ca", "workload-a", spiffe)
    _leaf(d, "cn_b", "ca", "b", client_ext)
    _leaf(d, "forged_a", "other_ca", "workload-a", spiffe)
    _ossl(d, "ec", "-in", "server.key", "-out", "server_enc.key", "-aes256", "-passout",
          f"pass:{PASSWORD}")
    _ossl(d, "genpkey", "-algorithm", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
          "-out", "mismatch.key")
    with open(os.path.join(d, "key_password.txt"), "w") as f:
        f.write(PASSWORD + "\n")
    with open(os.path.join(d, "client.pem"), "w") as out:
        for part in ("client.crt", "client.key"):
            with open(os.path.join(d, part)) as f:
                out.write(f.read())
    names = ["ca.crt", "other_ca.crt", "server.crt", "server.key", "server_ip_only.crt",
             "server_localhost.crt",
             "wrong_name.crt", "wrong_name.key", "client.crt", "client.key", "client.pem",
             "other_client.crt", "other_client.key", "expired_client.crt", "expired_client.key",
             "server_enc.key", "key_password.txt", "mismatch.key", "spiffe_a.crt", "spiffe_a.key",
             "cn_b.crt", "cn_b.key", "forged_a.crt", "forged_a.key"]
    for n in names:
        os.chmod(os.path.join(d, n), 0o644)  # the tests read them as root; keys stay in d
    return {n.replace(".", "_"): os.path.join(d, n) for n in names}


def make_origin_certs(d, names):
    """A CA and one server certificate from it whose SAN lists each of names
    (DNS names): an HTTPS origin serving all of them."""
    _ca(d, "origin_ca", "sandboxd egress test CA")
    _leaf(d, "origin", "origin_ca", names[0],
          "basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\nsubjectAltName="
          + ",".join(f"DNS:{n}" for n in names))
    out = {}
    for n in ("origin_ca.crt", "origin.crt", "origin.key"):
        os.chmod(os.path.join(d, n), 0o644)
        out[n.replace(".", "_")] = os.path.join(d, n)
    return out


def https_post_json(port, path, body, ca, cert=None, key=None, headers=None, timeout=60):
    """POST body as JSON to 127.0.0.1:port over TLS, trusting ca and showing
    cert/key when given: (status, parsed answer or {"raw": bytes}), or
    (None, {"error": ...}) when the connection or handshake failed."""
    import http.client
    import ssl
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(ca)
    if cert is not None:
        ctx.load_cert_chain(cert, key)
    c = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=timeout)
    try:
        c.request("POST", path, body=json.dumps(body).encode(),
                  headers={"Content-Type": "application/json", **(headers or {})})
        r = c.getresponse()
        raw = r.read()
        try:
            return r.status, json.loads(raw)
        except ValueError:
            return r.status, {"raw": raw}
    except (OSError, http.client.HTTPException, ssl.SSLError) as e:
        return None, {"error": repr(e)}
    finally:
        c.close()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: tls_certs.py DIR")
    print(json.dumps(make_certs(sys.argv[1])))
