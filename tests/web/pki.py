"""A throw-away PKI made at test time with `cryptography`: a CA, a server and client certificates."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_DAY = datetime.timedelta(days=1)


@dataclass
class Issuer:
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def key_usage(*, ca: bool) -> x509.KeyUsage:
    """A CA signs certificates and CRLs; a leaf signs and, with an RSA key, enciphers its session keys."""
    return x509.KeyUsage(
        digital_signature=True,
        key_cert_sign=ca,
        crl_sign=ca,
        content_commitment=False,
        key_encipherment=not ca,
        data_encipherment=False,
        key_agreement=False,
        encipher_only=False,
        decipher_only=False,
    )


def make_ca(common_name: str) -> Issuer:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(_name(common_name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _DAY)
        .not_valid_after(now + _DAY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(key_usage(ca=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return Issuer(cert, key)


def issue(ca: Issuer, common_name: str, sans: list[x509.GeneralName], *, server: bool) -> Issuer:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _DAY)
        .not_valid_after(now + _DAY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()), critical=False)
        .sign(ca.key, hashes.SHA256())
    )
    return Issuer(cert, key)


def write_pair(pair: Issuer, directory: Path, stem: str, password: bytes | None = None) -> tuple[Path, Path]:
    cert_path, key_path = directory / f"{stem}.crt", directory / f"{stem}.key"
    cert_path.write_bytes(pair.cert.public_bytes(serialization.Encoding.PEM))
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password) if password else serialization.NoEncryption()
    )
    key_path.write_bytes(
        pair.key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)
    )
    key_path.chmod(0o600)
    return cert_path, key_path


def server_sans() -> list[x509.GeneralName]:
    return [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]


@dataclass
class PKI:
    """Files in ``dir``: ca.crt, server.crt/key, client.crt/key (SAN scraper.example),
    other.crt/key (SAN intruder.example, same CA), rogue.crt/key (another CA),
    encrypted.key (server key, password protected), garbage.pem (not PEM), corrupt.crt (bad DER)."""

    dir: Path
    ca: Issuer

    @property
    def ca_file(self) -> Path:
        return self.dir / "ca.crt"

    def path(self, name: str) -> Path:
        return self.dir / name

    def new_server_cert(self, directory: Path, stem: str = "server") -> x509.Certificate:
        pair = issue(self.ca, "se-exporter", server_sans(), server=True)
        write_pair(pair, directory, stem)
        return pair.cert


def make_pki(directory: Path) -> PKI:
    ca = make_ca("se-exporter test CA")
    (directory / "ca.crt").write_bytes(ca.cert.public_bytes(serialization.Encoding.PEM))
    server = issue(ca, "se-exporter", server_sans(), server=True)
    write_pair(server, directory, "server")
    write_pair(server, directory, "encrypted", password=b"correct horse")
    (directory / "encrypted.crt").unlink()
    write_pair(issue(ca, "scraper", [x509.DNSName("scraper.example")], server=False), directory, "client")
    write_pair(issue(ca, "intruder", [x509.DNSName("intruder.example")], server=False), directory, "other")
    rogue_ca = make_ca("rogue CA")
    write_pair(issue(rogue_ca, "scraper", [x509.DNSName("scraper.example")], server=False), directory, "rogue")
    (directory / "garbage.pem").write_text("this is not a certificate\n")
    (directory / "corrupt.crt").write_text("-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n")
    return PKI(directory, ca)
