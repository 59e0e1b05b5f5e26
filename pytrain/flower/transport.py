"""How Fleet API requests leave the node: a signer (who we are) and a transport (how bytes travel).

Both are pluggable. Natively: :class:`EcdsaSigner` (``cryptography``, P-256 ECDSA-SHA256) and
:class:`HttpTransport` (one kept-alive HTTP/1.1 connection a node). In a browser, a WebCrypto signer
and a ``fetch`` transport take their place.

The SuperLink checks every request, even with node authentication off: ``flwr-public-key`` is the
base64 of the node's PEM SubjectPublicKeyInfo, ``flwr-timestamp`` an ISO-8601 UTC time (a few
seconds of clock skew are allowed) and ``flwr-signature`` the base64 DER ECDSA-SHA256 signature of
that timestamp.
"""
from __future__ import annotations

import base64
import datetime
import http.client
import urllib.parse
from typing import Callable, Dict, Optional, Tuple

from pytrain.errors import PytrainError

#: (url, body, headers, timeout seconds) -> (HTTP status, response body)
Transport = Callable[[str, bytes, Dict[str, str], float], Tuple[int, bytes]]
CONTENT_TYPE = "application/protobuf"
#: the largest Fleet answer read: one object (an ArrayChunk is at most 5 MiB) or a message's object tree
MAX_RESPONSE = 16 << 20


class FederationError(PytrainError, RuntimeError):
    """The SuperLink refused a request or could not be reached, or the federation cannot go on."""


class AnswerTooLarge(FederationError):
    """An answer over :data:`MAX_RESPONSE` bytes: only its first ``head`` bytes (at most that many)
    were read, so that the node can still say no to the messages that begin there."""

    def __init__(self, what: str, size: Optional[int], head: "bytes | memoryview") -> None:
        super().__init__("the answer to %s is %s bytes, more than any Fleet answer takes (%d): not read"
                         % (what, "more than %d" % MAX_RESPONSE if size is None else size, MAX_RESPONSE))
        self.head = memoryview(head)[:MAX_RESPONSE]  # no copy


class EcdsaSigner:
    """A P-256 key pair from ``cryptography`` (fresh unless ``private_key_pem`` is given)."""

    def __init__(self, private_key_pem: Optional[bytes] = None) -> None:
        try:
            from cryptography.hazmat.primitives import hashes, serialization
            from cryptography.hazmat.primitives.asymmetric import ec
        except ImportError:
            raise FederationError("signing Fleet API requests needs the 'cryptography' package: "
                                  "pip install \"pytrain[flower]\" (or pip install cryptography), "
                                  "or pass your own signer") from None
        self._hashes, self._ec = hashes, ec
        if private_key_pem is None:
            self._key = ec.generate_private_key(ec.SECP256R1())
        else:
            self._key = serialization.load_pem_private_key(private_key_pem, password=None)
            if not isinstance(self._key, ec.EllipticCurvePrivateKey):
                raise FederationError("the node key must be an elliptic-curve (P-256) private key")
        self.public_key_pem: bytes = self._key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)

    def sign(self, data: bytes) -> bytes:
        """DER-encoded ECDSA-SHA256 signature of ``data``."""
        return self._key.sign(data, self._ec.ECDSA(self._hashes.SHA256()))


def timestamp() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat()


def signed_headers(signer: "EcdsaSigner") -> Dict[str, str]:
    """The headers that authenticate one request (a fresh timestamp, signed)."""
    ts = timestamp()
    return {"Content-Type": CONTENT_TYPE, "Accept": CONTENT_TYPE,
            "flwr-public-key": base64.b64encode(signer.public_key_pem).decode("ascii"),
            "flwr-timestamp": ts,
            "flwr-signature": base64.b64encode(signer.sign(ts.encode("ascii"))).decode("ascii")}


class HttpTransport:
    """POST over one kept-alive HTTP/1.1 connection (``http.client``): a node opens one TCP connection,
    not one a request, and opens it again when the SuperLink closed it while idle (uvicorn does after
    5 s). HTTP errors come back as (status, body), not exceptions. One node, one instance."""

    def __init__(self) -> None:
        self.connection: "Optional[http.client.HTTPConnection]" = None
        self.origin: "Optional[Tuple[str, str]]" = None
        #: TCP connections opened, for measurements
        self.opened = 0

    def close(self) -> None:
        if self.connection is not None:
            self.connection.close()
        self.connection = None

    def _connect(self, scheme: str, netloc: str, timeout: float) -> "http.client.HTTPConnection":
        self.close()
        cls = http.client.HTTPSConnection if scheme == "https" else http.client.HTTPConnection
        self.connection, self.origin = cls(netloc, timeout=timeout), (scheme, netloc)
        self.opened += 1
        return self.connection

    def __call__(self, url: str, body: bytes, headers: Dict[str, str], timeout: float) -> Tuple[int, bytes]:
        parts = urllib.parse.urlsplit(url)
        path = parts.path + ("?" + parts.query if parts.query else "")
        for fresh in (False, True):
            conn = self.connection
            if fresh or conn is None or self.origin != (parts.scheme, parts.netloc):
                conn, fresh = self._connect(parts.scheme, parts.netloc, timeout), True
            conn.timeout = timeout
            if conn.sock is not None:
                conn.sock.settimeout(timeout)
            try:
                try:
                    conn.request("POST", path, body=body, headers=headers)
                    resp = conn.getresponse()
                except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                    if fresh:
                        raise
                    # no answer on a reused connection: the SuperLink had closed it while idle, before
                    # reading the request; once more, on a new one
                    self.close()
                    continue
                data = resp.read((MAX_RESPONSE if resp.status == 200 else 1 << 16) + 1)
            except (OSError, http.client.HTTPException) as e:
                self.close()
                raise FederationError("cannot reach the SuperLink at %s: %s" % (url, e)) from None
            if not resp.isclosed():  # more than we read: the rest is never read, the connection goes
                self.close()
            if resp.status != 200:
                return resp.status, data[:1 << 16]  # an error's detail, not a body to trust
            if len(data) > MAX_RESPONSE:
                raise AnswerTooLarge(url.rsplit("/", 1)[-1], None, data)
            return resp.status, data
        raise AssertionError("unreachable")
