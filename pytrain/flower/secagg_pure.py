"""What SecAgg+ takes from ``cryptography``, in plain Python: for where that package is absent (a
browser tab's Pyodide 0.17 has none). :mod:`pytrain.flower.secagg_crypto` uses it only then.

- P-384 (SECP384R1) key pairs as PEM (PKCS8 private keys, SubjectPublicKeyInfo public keys, as
  OpenSSL writes them), ECDH (the shared x coordinate);
- HKDF-SHA256 (RFC 5869; no salt, no info, as flwr calls it);
- Fernet (AES-128-CBC with PKCS#7 padding, then HMAC-SHA256; version 0x80, urlsafe base64).

``tests/flower/test_secagg_pure.py`` checks each against ``cryptography`` byte for byte. Python's
integers are not constant-time: a fallback for what SecAgg+ protects (one round's masks and shares),
not a general-purpose library.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import os
import struct
import time
from typing import List, Optional, Tuple

from pytrain.errors import PytrainError

# -- P-384 (FIPS 186-4, D.1.2.4) -------------------------------------------------------------------------------
P = 2 ** 384 - 2 ** 128 - 2 ** 96 + 2 ** 32 - 1
B = 0xB3312FA7E23EE7E4988E056BE3F82D19181D9C6EFE8141120314088F5013875AC656398D8A2ED19D2A85C8EDD3EC2AEF
N = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFC7634D81F4372DDF581A0DB248B0A77AECEC196ACCC52973
G = (0xAA87CA22BE8B05378EB1C71EF320AD746E1D3B628BA79B9859F741E082542A385502F25DBF55296C3A545E3872760AB7,
     0x3617DE4A96262C6F5D9E98BF9292DC29F8F41DBD289A147CE9DA3113B5F0B8C00A60B1CE1D7E819D7A431D7C90EA0E5F)
SIZE = 48  # bytes of a coordinate or a private scalar

Point = Optional[Tuple[int, int]]  # affine; None is the point at infinity


class PureCryptoError(PytrainError, ValueError):
    """A key, token or point that is not what it must be."""


def on_curve(x: int, y: int) -> bool:
    return 0 <= x < P and 0 <= y < P and (y * y - (x * x * x - 3 * x + B)) % P == 0


def _double(x: int, y: int, z: int) -> Tuple[int, int, int]:
    """Jacobian doubling for a = -3."""
    if not y or not z:
        return 0, 1, 0
    zz = z * z % P
    m = 3 * (x - zz) * (x + zz) % P
    yy = y * y % P
    s = 4 * x * yy % P
    x3 = (m * m - 2 * s) % P
    return x3, (m * (s - x3) - 8 * yy * yy) % P, 2 * y * z % P


def _add(p1: Tuple[int, int, int], x2: int, y2: int) -> Tuple[int, int, int]:
    """Jacobian p1 plus the affine (x2, y2)."""
    x1, y1, z1 = p1
    if not z1:
        return x2, y2, 1
    zz = z1 * z1 % P
    u2, s2 = x2 * zz % P, y2 * zz * z1 % P
    h, r = (u2 - x1) % P, (s2 - y1) % P
    if not h:
        return _double(x1, y1, z1) if not r else (0, 1, 0)
    hh = h * h % P
    hhh = h * hh % P
    v = x1 * hh % P
    x3 = (r * r - hhh - 2 * v) % P
    return x3, (r * (v - x3) - y1 * hhh) % P, z1 * h % P


def multiply(k: int, point: Tuple[int, int]) -> Point:
    """k * point (double and add, most significant bit first); None for the point at infinity."""
    acc = (0, 1, 0)
    for bit in bin(k)[2:]:
        acc = _double(*acc)
        if bit == "1":
            acc = _add(acc, *point)
    x, y, z = acc
    if not z:
        return None
    zi = pow(z, P - 2, P)
    zi2 = zi * zi % P
    return x * zi2 % P, y * zi2 * zi % P


# -- PEM, as OpenSSL writes P-384 keys ----------------------------------------------------------------------------
_ALGORITHM = bytes.fromhex("301006072a8648ce3d020106052b81040022")  # {ecPublicKey, secp384r1}
_SPKI = bytes.fromhex("3076") + _ALGORITHM + bytes.fromhex("03620004")
_PKCS8 = bytes.fromhex("3081b6020100") + _ALGORITHM + bytes.fromhex("04819e30819b0201010430")
_PKCS8_PUB = bytes.fromhex("a16403620004")


def _pem(kind: str, der: bytes) -> bytes:
    b64 = base64.b64encode(der).decode("ascii")
    lines = [b64[i:i + 64] for i in range(0, len(b64), 64)]
    return ("-----BEGIN %s-----\n%s\n-----END %s-----\n" % (kind, "\n".join(lines), kind)).encode("ascii")


def _der(kind: str, pem: bytes) -> bytes:
    text = bytes(pem).decode("ascii", "replace").strip()
    head, tail = "-----BEGIN %s-----" % kind, "-----END %s-----" % kind
    if not (text.startswith(head) and text.endswith(tail)):
        raise PureCryptoError("not a PEM %s" % kind)
    try:
        return base64.b64decode("".join(text[len(head):-len(tail)].split()), validate=True)
    except ValueError:
        raise PureCryptoError("a PEM %s whose base64 is broken" % kind) from None


def _coord(v: int) -> bytes:
    return v.to_bytes(SIZE, "big")


def public_pem(point: Tuple[int, int]) -> bytes:
    return _pem("PUBLIC KEY", _SPKI + _coord(point[0]) + _coord(point[1]))


def private_pem(d: int) -> bytes:
    pub = multiply(d, G)
    assert pub is not None
    return _pem("PRIVATE KEY", _PKCS8 + _coord(d) + _PKCS8_PUB + _coord(pub[0]) + _coord(pub[1]))


def load_public(pem: bytes) -> Tuple[int, int]:
    """A P-384 public key (uncompressed point, as flwr sends them) on the curve, or PureCryptoError."""
    der = _der("PUBLIC KEY", pem)
    if len(der) != len(_SPKI) + 2 * SIZE or not der.startswith(_SPKI):
        raise PureCryptoError("not an uncompressed P-384 SubjectPublicKeyInfo")
    x, y = int.from_bytes(der[len(_SPKI):-SIZE], "big"), int.from_bytes(der[-SIZE:], "big")
    if not on_curve(x, y):
        raise PureCryptoError("the public key's point is not on P-384")
    return x, y


def load_private(pem: bytes) -> int:
    der = _der("PRIVATE KEY", pem)
    if len(der) != len(_PKCS8) + SIZE + len(_PKCS8_PUB) + 2 * SIZE or not der.startswith(_PKCS8):
        raise PureCryptoError("not a P-384 PKCS8 private key as this module writes them")
    d = int.from_bytes(der[len(_PKCS8):len(_PKCS8) + SIZE], "big")
    if not 0 < d < N:
        raise PureCryptoError("the private key is out of range")
    return d


def generate_key_pair() -> Tuple[bytes, bytes]:
    """(private key PEM, public key PEM), a fresh P-384 key from os.urandom."""
    while True:
        d = int.from_bytes(os.urandom(SIZE), "big")
        if 0 < d < N:
            break
    pub = multiply(d, G)
    assert pub is not None
    return private_pem(d), public_pem(pub)


def ecdh(private_key_pem: bytes, public_key_pem: bytes) -> bytes:
    """The shared secret: the x coordinate of d * Q, 48 bytes big-endian (what OpenSSL's ECDH gives)."""
    shared = multiply(load_private(private_key_pem), load_public(public_key_pem))
    if shared is None:
        raise PureCryptoError("ECDH gave the point at infinity")
    return _coord(shared[0])


# -- HKDF-SHA256 (RFC 5869) ----------------------------------------------------------------------------------------
def hkdf_sha256(secret: bytes, length: int = 32, salt: Optional[bytes] = None, info: bytes = b"") -> bytes:
    prk = hmac.new(salt or bytes(32), secret, hashlib.sha256).digest()
    out, block, i = b"", b"", 1
    while len(out) < length:
        block = hmac.new(prk, block + info + bytes([i]), hashlib.sha256).digest()
        out += block
        i += 1
    return out[:length]


# -- AES-128 (FIPS 197) --------------------------------------------------------------------------------------------
def _xtime(a: int) -> int:
    a <<= 1
    return (a ^ 0x11B) if a & 0x100 else a


def _tables() -> Tuple[List[int], List[int]]:
    """exp and log of GF(2^8) to the generator 3."""
    exp, log, e = [0] * 510, [0] * 256, 1
    for i in range(255):
        exp[i] = exp[i + 255] = e
        log[e] = i
        e ^= _xtime(e)
    return exp, log


_EXP, _LOG = _tables()


def _mul(a: int, b: int) -> int:
    return _EXP[_LOG[a] + _LOG[b]] if a and b else 0


def _sbox() -> Tuple[List[int], List[int]]:
    box = []
    for a in range(256):
        x = _EXP[255 - _LOG[a]] if a else 0  # the inverse
        s = x
        for _ in range(4):
            x = ((x << 1) | (x >> 7)) & 0xFF
            s ^= x
        box.append(s ^ 0x63)
    back = [0] * 256
    for i, v in enumerate(box):
        back[v] = i
    return box, back


SBOX, INV_SBOX = _sbox()


def _expand(key: bytes) -> List[List[int]]:
    """The 11 round keys of AES-128, each 16 bytes (column-major, as the state)."""
    words = [list(key[i:i + 4]) for i in range(0, 16, 4)]
    rcon = 1
    for i in range(4, 44):
        t = list(words[i - 1])
        if i % 4 == 0:
            t = [SBOX[b] for b in t[1:] + t[:1]]
            t[0] ^= rcon
            rcon = _xtime(rcon) & 0xFF
        words.append([a ^ b for a, b in zip(words[i - 4], t)])
    return [sum(words[r * 4:r * 4 + 4], []) for r in range(11)]


_SHIFT = [0, 5, 10, 15, 4, 9, 14, 3, 8, 13, 2, 7, 12, 1, 6, 11]  # state[i] <- state[_SHIFT[i]]
_UNSHIFT = [_SHIFT.index(i) for i in range(16)]


def _mix(s: List[int], m: Tuple[int, int, int, int]) -> List[int]:
    out = []
    for c in range(4):
        col = s[4 * c:4 * c + 4]
        for r in range(4):
            out.append(_mul(col[0], m[(0 - r) % 4]) ^ _mul(col[1], m[(1 - r) % 4]) ^ _mul(col[2], m[(2 - r) % 4])
                       ^ _mul(col[3], m[(3 - r) % 4]))
    return out


def _encrypt_block(keys: List[List[int]], block: bytes) -> bytes:
    s = [a ^ b for a, b in zip(block, keys[0])]
    for rnd in range(1, 11):
        s = [SBOX[s[_SHIFT[i]]] for i in range(16)]
        if rnd < 10:
            s = _mix(s, (2, 3, 1, 1))
        s = [a ^ b for a, b in zip(s, keys[rnd])]
    return bytes(s)


def _decrypt_block(keys: List[List[int]], block: bytes) -> bytes:
    s = [a ^ b for a, b in zip(block, keys[10])]
    for rnd in range(9, -1, -1):
        s = [INV_SBOX[s[_UNSHIFT[i]]] for i in range(16)]
        s = [a ^ b for a, b in zip(s, keys[rnd])]
        if rnd > 0:
            s = _mix(s, (14, 11, 13, 9))
    return bytes(s)


def aes128_cbc_encrypt(key: bytes, iv: bytes, data: bytes) -> bytes:
    """``data`` PKCS#7-padded to 16 bytes, then AES-128-CBC."""
    keys = _expand(key)
    pad = 16 - len(data) % 16
    data = bytes(data) + bytes([pad]) * pad
    out, prev = [], iv
    for i in range(0, len(data), 16):
        prev = _encrypt_block(keys, bytes(a ^ b for a, b in zip(data[i:i + 16], prev)))
        out.append(prev)
    return b"".join(out)


def aes128_cbc_decrypt(key: bytes, iv: bytes, data: bytes) -> bytes:
    if not data or len(data) % 16:
        raise PureCryptoError("AES-CBC ciphertext of %d bytes (not whole blocks)" % len(data))
    keys = _expand(key)
    out, prev = [], iv
    for i in range(0, len(data), 16):
        block = data[i:i + 16]
        out.append(bytes(a ^ b for a, b in zip(_decrypt_block(keys, block), prev)))
        prev = block
    plain = b"".join(out)
    pad = plain[-1]
    if not 1 <= pad <= 16 or plain[-pad:] != bytes([pad]) * pad:
        raise PureCryptoError("bad PKCS#7 padding")
    return plain[:-pad]


# -- Fernet (the spec at github.com/fernet/spec) ---------------------------------------------------------------------
def _fernet_key(key: bytes) -> Tuple[bytes, bytes]:
    raw = base64.urlsafe_b64decode(bytes(key))
    if len(raw) != 32:
        raise PureCryptoError("a Fernet key must be 32 url-safe base64-encoded bytes")
    return raw[:16], raw[16:]  # signing key, encryption key


def fernet_encrypt(key: bytes, data: bytes, iv: Optional[bytes] = None, at: Optional[int] = None) -> bytes:
    """A Fernet token (``iv`` and ``at``, the timestamp, are fresh unless given: for tests)."""
    signing, encryption = _fernet_key(key)
    iv = os.urandom(16) if iv is None else iv
    parts = b"\x80" + struct.pack(">Q", int(time.time()) if at is None else at) + iv + \
        aes128_cbc_encrypt(encryption, iv, data)
    return base64.urlsafe_b64encode(parts + hmac.new(signing, parts, hashlib.sha256).digest())


def fernet_decrypt(key: bytes, token: bytes) -> bytes:
    """The plaintext, or PureCryptoError when the token is malformed or its HMAC does not match."""
    signing, encryption = _fernet_key(key)
    try:
        raw = base64.urlsafe_b64decode(bytes(token))
    except ValueError:
        raise PureCryptoError("a Fernet token whose base64 is broken") from None
    if len(raw) < 1 + 8 + 16 + 16 + 32 or raw[0] != 0x80:
        raise PureCryptoError("not a Fernet token")
    parts, mac = raw[:-32], raw[-32:]
    if not hmac.compare_digest(hmac.new(signing, parts, hashlib.sha256).digest(), mac):
        raise PureCryptoError("the Fernet token's HMAC does not match")
    return aes128_cbc_decrypt(encryption, parts[9:25], parts[25:])
