"""A client certificate for mutual-TLS tests: a throwaway CA that the
receiver trusts for clients, and a certificate it signed for dispatcher."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class ClientFiles:
    ca: Path  # what the receiver verifies clients against
    cert: Path
    key: Path


def make_client(directory: Path, common_name: str = "dispatcher client") -> ClientFiles:
    now = datetime.datetime.now(datetime.UTC)
    start, end = now - datetime.timedelta(hours=1), now + datetime.timedelta(days=1)

    def issue(
        subject: str,
        key: ec.EllipticCurvePrivateKey,
        issuer: str,
        signer: ec.EllipticCurvePrivateKey,
        *,
        ca: bool,
    ) -> x509.Certificate:
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if not ca:
            usage = x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH])
            builder = builder.add_extension(usage, critical=False)
        return builder.sign(signer, hashes.SHA256())

    ca_key = ec.generate_private_key(ec.SECP256R1())
    key = ec.generate_private_key(ec.SECP256R1())
    ca = issue("client CA", ca_key, "client CA", ca_key, ca=True)
    cert = issue(common_name, key, "client CA", ca_key, ca=False)
    directory.mkdir(parents=True, exist_ok=True)
    files = ClientFiles(directory / "client-ca.pem", directory / "client.pem",
                        directory / "client.key")  # fmt: skip
    files.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    files.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    files.key.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                            serialization.PrivateFormat.PKCS8,
                                            serialization.NoEncryption()))  # fmt: skip
    return files
