"""The test control plane's certificates and kubeconfigs, made in-process with `cryptography`.

Two certificate authorities, as a kubeadm cluster has: the server CA signs the API server's
serving certificate (127.0.0.1 and localhost) and is what every client trusts (and what the
controller-manager publishes as `kube-root-ca.crt`); the client CA signs the identities that talk
to the API server — the admin (O=system:masters), the controller-manager and the scheduler under
their own names (so the bootstrap RBAC policy, not a superuser, is what they are allowed), and
any user a test mints. Keeping them apart means a test's user certificate can never pass as a
server. Elliptic-curve keys keep minting fast; the service-account signing key is RSA, as kubeadm's.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# Long enough for any test session, short enough that nothing made here is worth keeping.
VALIDITY = datetime.timedelta(days=2)


def _pem_key(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


@dataclass(frozen=True)
class Issued:
    """A certificate and its private key, both PEM."""

    cert_pem: bytes
    key_pem: bytes

    def write(self, cert: Path, key: Path) -> None:
        cert.write_bytes(self.cert_pem)
        key.write_bytes(self.key_pem)
        key.chmod(0o600)


class Authority:
    """A self-signed CA that issues serving and client certificates."""

    def __init__(self, common_name: str) -> None:
        self._key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        self._name = name
        self.certificate = (
            x509.CertificateBuilder()
            .subject_name(name).issuer_name(name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True,
                content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self._key.public_key()),
                           critical=False)
            .sign(self._key, hashes.SHA256())
        )
        self.cert_pem = self.certificate.public_bytes(serialization.Encoding.PEM)

    def _issue(self, subject: x509.Name, usage: x509.ObjectIdentifier,
               sans: Sequence[x509.GeneralName] = ()) -> Issued:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject).issuer_name(self._name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(
                digital_signature=True, key_encipherment=False, key_cert_sign=False,
                crl_sign=False, content_commitment=False, data_encipherment=False,
                key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                self._key.public_key()), critical=False)
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(list(sans)),
                                            critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        return Issued(cert.public_bytes(serialization.Encoding.PEM), _pem_key(key))

    def serving(self, common_name: str, hosts: Sequence[str]) -> Issued:
        """A TLS server certificate for these DNS names and IP addresses."""
        sans: list[x509.GeneralName] = []
        for host in hosts:
            try:
                sans.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                sans.append(x509.DNSName(host))
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        return self._issue(subject, ExtendedKeyUsageOID.SERVER_AUTH, sans)

    def client(self, user: str, groups: Sequence[str] = ()) -> Issued:
        """A client certificate the API server reads as `user` in `groups` (CN and O)."""
        attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups]
        attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, user))
        return self._issue(x509.Name(attributes), ExtendedKeyUsageOID.CLIENT_AUTH)


def service_account_key() -> tuple[bytes, bytes]:
    """(private, public) PEM of a key the API server signs service-account tokens with."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = key.public_key().public_bytes(serialization.Encoding.PEM,
                                           serialization.PublicFormat.SubjectPublicKeyInfo)
    return _pem_key(key), public


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def write_kubeconfig(path: Path, *, server: str, ca_pem: bytes, user: str,
                     client: Issued | None = None, token: str | None = None) -> Path:
    """A self-contained kubeconfig (everything embedded) for one identity: a client certificate
    or a bearer token. JSON is YAML, so kubectl, helm and the Python client all read it."""
    credentials: dict[str, str] = {}
    if client is not None:
        credentials["client-certificate-data"] = _b64(client.cert_pem)
        credentials["client-key-data"] = _b64(client.key_pem)
    if token is not None:
        credentials["token"] = token
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "test", "cluster": {
            "server": server, "certificate-authority-data": _b64(ca_pem)}}],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": user, "context": {"cluster": "test", "user": user}}],
        "current-context": user,
    }
    path.write_text(json.dumps(config, indent=2))
    path.chmod(0o600)
    return path
