"""A test CA and certificates made with openssl (test helper, not part of the collection): what
tests/integration/test_vllm_gateway_backend_tls.py runs HAProxy with, and what the gateway
Molecule scenario's prepare puts on its hosts (molecule/gateway/prepare.yml).

    python3 tests/helpers/tls.py DIR NAME [NAME ...]
        DIR/ca.pem (and its key), and for each NAME DIR/NAME.bundle.pem (certificate and key in one
        file, as HAProxy's crt reads it), a certificate for NAME, localhost and 127.0.0.1.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys


def openssl(*args):
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def make_ca(directory):
    """A CA of its own in DIRECTORY: (key, cert)."""
    directory = pathlib.Path(directory)
    key, cert = directory / "ca.key", directory / "ca.pem"
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
            "-subj", "/CN=fleet.vllm test CA", "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign", "-keyout", str(key), "-out", str(cert))
    return key, cert


def issue(directory, ca, name, also=()):
    """A certificate for NAME (its CN and first subjectAltName; ALSO: more subjectAltName entries such as
    "DNS:localhost" or "IP:127.0.0.1") signed by CA: (cert, key, bundle)."""
    directory = pathlib.Path(directory)
    ca_key, ca_cert = ca
    key, csr, cert = directory / (name + ".key"), directory / (name + ".csr"), directory / (name + ".pem")
    ext = directory / (name + ".ext")
    ext.write_text("subjectAltName=%s\nextendedKeyUsage=serverAuth\n" % ",".join(["DNS:" + name, *also]))
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-subj", "/CN=" + name,
            "-keyout", str(key), "-out", str(csr))
    openssl("x509", "-req", "-in", str(csr), "-CA", str(ca_cert), "-CAkey", str(ca_key), "-CAcreateserial",
            "-days", "2", "-extfile", str(ext), "-out", str(cert))
    bundle = directory / (name + ".bundle.pem")  # HAProxy's crt: the certificate and its key in one file
    bundle.write_bytes(cert.read_bytes() + key.read_bytes())
    bundle.chmod(0o600)
    return cert, key, bundle


def main(argv):
    directory = pathlib.Path(argv[0])
    directory.mkdir(parents=True, exist_ok=True)
    ca = make_ca(directory)
    for name in argv[1:]:
        issue(directory, ca, name, also=("DNS:localhost", "IP:127.0.0.1"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
