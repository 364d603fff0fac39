"""Certificates made on the fly for TLS tests (the `cryptography` package, in the
test extras): a CA, broker certificates for 127.0.0.1 and localhost, client
certificates, all PEM files in one directory, and the server.properties a
broker needs to listen with TLS:

    certs = Certificates.create(tmp_path / "certs")
    broker = BrokerProcess(tmp_path / "data", tls=certs, client_auth="required")
    client = certs.client("alice")
    Producer({"bootstrap.servers": broker.ssl_bootstrap, "security.protocol": "SSL",
              "ssl.ca.location": str(certs.ca), "ssl.certificate.location": str(client.cert),
              "ssl.key.location": str(client.key)})
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALID = datetime.timedelta(days=30)
_CA_KEY_USAGE = x509.KeyUsage(
    digital_signature=True, content_commitment=False, key_encipherment=False,
    data_encipherment=False, key_agreement=False, key_cert_sign=True,
    crl_sign=True, encipher_only=False, decipher_only=False,
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class ClientCertificate:
    cert: Path  # the certificate (PEM)
    key: Path  # its private key (PEM, unencrypted)
    subject: str  # as Kafka names it: CN=alice,O=Moldau Test


def _name(cn: str, org: str) -> x509.Name:
    return x509.Name([
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, org),
        x509.NameAttribute(NameOID.COMMON_NAME, cn),
    ])  # fmt: skip


def _key_pem(key: ec.EllipticCurvePrivateKey, password: str | None = None) -> bytes:
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password.encode())
        if password
        else serialization.NoEncryption()
    )
    pkcs8 = serialization.PrivateFormat.PKCS8
    return key.private_bytes(serialization.Encoding.PEM, pkcs8, encryption)


class Certificates:
    """A CA in `directory` (ca.pem, ca-key.pem) that issues the others."""

    def __init__(self, directory: Path, org: str = "Moldau Test") -> None:
        self.directory = Path(directory)
        self.org = org
        self.ca = self.directory / "ca.pem"
        self._ca_key_path = self.directory / "ca-key.pem"
        self._ca_key = serialization.load_pem_private_key(self._ca_key_path.read_bytes(), None)
        self._ca_cert = x509.load_pem_x509_certificate(self.ca.read_bytes())

    @classmethod
    def create(cls, directory: Path, org: str = "Moldau Test") -> Certificates:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        key = ec.generate_private_key(ec.SECP256R1())
        name = _name(f"{org} CA", org)
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + _VALID)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(_CA_KEY_USAGE, critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
            .sign(key, hashes.SHA256())
        )
        (directory / "ca-key.pem").write_bytes(_key_pem(key))
        (directory / "ca.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return cls(directory, org)

    def _issue(
        self, cn: str, sans: list[str], usages: list[x509.ObjectIdentifier]
    ) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(cn, self.org))
            .issuer_name(self._ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + _VALID)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(
                    self._ca_cert.public_key()  # type: ignore[arg-type]
                ),
                critical=False,
            )
        )
        if sans:
            names: list[x509.GeneralName] = []
            for san in sans:
                try:
                    names.append(x509.IPAddress(ipaddress.ip_address(san)))
                except ValueError:
                    names.append(x509.DNSName(san))
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        ca_key = self._ca_key
        assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
        return key, builder.sign(ca_key, hashes.SHA256())

    def broker(
        self,
        name: str = "broker",
        hosts: tuple[str, ...] = ("127.0.0.1", "localhost", "::1"),
        key_password: str | None = None,
    ) -> Path:
        """`<name>.pem`: the broker's key then its certificate and the CA's (Kafka's
        PEM keystore: ssl.keystore.location). Valid as client too: brokers present
        it to each other where ssl.client.auth asks for a certificate."""
        # Server and client auth both: a broker is the client of the others.
        key, cert = self._issue(
            name, list(hosts), [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
        )
        path = self.directory / f"{name}.pem"
        path.write_bytes(
            _key_pem(key, key_password)
            + cert.public_bytes(serialization.Encoding.PEM)
            + self.ca.read_bytes()
        )
        return path

    def client(self, cn: str) -> ClientCertificate:
        """A client certificate with subject `CN=<cn>,O=<org>`."""
        key, cert = self._issue(cn, [], [ExtendedKeyUsageOID.CLIENT_AUTH])
        cert_path = self.directory / f"client-{cn}.pem"
        key_path = self.directory / f"client-{cn}-key.pem"
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_path.write_bytes(_key_pem(key))
        return ClientCertificate(cert_path, key_path, f"CN={cn},O={self.org}")

    def broker_properties(self, client_auth: str = "none", name: str = "broker") -> dict[str, str]:
        """The ssl.* server.properties of a broker with this CA's certificates."""
        return {
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.broker(name)),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.ca),
            "ssl.client.auth": client_auth,
        }
