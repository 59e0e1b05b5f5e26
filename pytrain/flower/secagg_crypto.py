"""The primitives of Flower's SecAgg+ (``flwr.common.secure_aggregation``), byte for byte.

Key agreement: ECDH on P-384 (keys as PEM, SubjectPublicKeyInfo / PKCS8), HKDF-SHA256 to 32 bytes,
urlsafe base64 (a Fernet key); encryption: Fernet. These come from the ``cryptography`` package
when it is installed, else from :mod:`pytrain.flower.secagg_pure` (plain Python, the same bytes: a
browser tab's Pyodide has no ``cryptography``). Shamir's secret sharing is
PyCryptodome's over GF(2^128) (``ssss=False``), written here in plain Python; the mask generator is
numpy's legacy ``RandomState`` (its stream is stable across numpy versions, 1.17 included).
"""
from __future__ import annotations

import base64
import os
from typing import Any, List, Sequence, Tuple

import numpy as np

from pytrain.errors import PytrainError
from pytrain.flower import secagg_pure as pure


class SecAggError(PytrainError, ValueError):
    """A SecAgg+ message that cannot be answered (bad stage, config, key or share)."""


class CryptoStep:
    """One public-key operation of a SecAgg+ stage, for whoever performs it: :func:`perform` here, or
    a browser tab's worker with WebCrypto (web/worker/secagg_crypto.js), which answers the same bytes.

    ``op`` and ``args`` -> result: ``key_pair`` () -> [private PEM, public PEM]; ``shared_key``
    (private PEM, public PEM) -> Fernet key; ``encrypt`` (key, plaintext) -> token; ``decrypt``
    (key, token) -> plaintext (a token that does not decrypt: SecAggError)."""
    __slots__ = ("op", "args")

    def __init__(self, op: str, *args: bytes) -> None:
        self.op, self.args = op, args


def perform(step: CryptoStep) -> Any:
    """Perform ``step`` in Python: with ``cryptography`` when installed, else the pure fallback."""
    if step.op == "key_pair":
        return list(generate_key_pair())
    if step.op == "shared_key":
        return shared_key(*step.args)
    if step.op == "encrypt":
        return encrypt(*step.args)
    if step.op == "decrypt":
        return decrypt(*step.args)
    raise SecAggError("unknown crypto operation %r" % step.op)


def provider() -> str:
    """Which library :func:`perform` uses: ``"cryptography"`` or ``"pure"``."""
    return "pure" if cryptography_modules() is None else "cryptography"


def cryptography_modules() -> Any:
    """The ``cryptography`` modules SecAgg+ uses, or None: then :mod:`pytrain.flower.secagg_pure` serves."""
    try:
        from cryptography.fernet import Fernet, InvalidToken
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.hazmat.primitives.kdf.hkdf import HKDF
    except ImportError:
        return None
    return Fernet, InvalidToken, hashes, serialization, ec, HKDF


# -- keys ------------------------------------------------------------------------------------------------
def generate_key_pair() -> Tuple[bytes, bytes]:
    """(private key PEM, public key PEM) on SECP384R1, as flwr's ``generate_key_pairs``."""
    c = cryptography_modules()
    if c is None:
        return pure.generate_key_pair()
    _, _, _, ser, ec, _ = c
    sk = ec.generate_private_key(ec.SECP384R1())
    return (sk.private_bytes(ser.Encoding.PEM, ser.PrivateFormat.PKCS8, ser.NoEncryption()),
            sk.public_key().public_bytes(ser.Encoding.PEM, ser.PublicFormat.SubjectPublicKeyInfo))


def load_public_key(pem: bytes) -> Any:
    """A peer's P-384 public key, or SecAggError when ``pem`` is not one."""
    c = cryptography_modules()
    if c is None:
        try:
            return pure.load_public(pem)
        except pure.PureCryptoError as e:
            raise SecAggError("a public key from the server is not a P-384 PEM public key (%s)" % e) from None
    _, _, _, ser, ec, _ = c
    try:
        key = ser.load_pem_public_key(bytes(pem))
    except Exception as e:  # ValueError, TypeError, UnsupportedAlgorithm: whatever it is, refused
        raise SecAggError("a public key from the server is not a PEM public key (%s)" % e) from None
    if not isinstance(key, ec.EllipticCurvePublicKey) or key.curve.name != "secp384r1":
        raise SecAggError("a public key from the server is not a P-384 key")
    return key


def shared_key(private_pem: bytes, public_pem: bytes) -> bytes:
    """flwr's ``generate_shared_key``: ECDH, HKDF-SHA256 (no salt, no info) to 32 bytes, urlsafe base64."""
    c = cryptography_modules()
    if c is None:
        load_public_key(public_pem)  # refused as the package would refuse it
        return base64.urlsafe_b64encode(pure.hkdf_sha256(pure.ecdh(private_pem, public_pem), 32))
    _, _, hashes, ser, ec, HKDF = c
    sk = ser.load_pem_private_key(bytes(private_pem), password=None)
    secret = sk.exchange(ec.ECDH(), load_public_key(public_pem))
    return base64.urlsafe_b64encode(HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=None).derive(secret))


def encrypt(key: bytes, plaintext: bytes) -> bytes:
    c = cryptography_modules()
    return pure.fernet_encrypt(key, plaintext) if c is None else c[0](key).encrypt(plaintext)


def decrypt(key: bytes, token: bytes) -> bytes:
    c = cryptography_modules()
    try:
        if c is None:
            return pure.fernet_decrypt(key, bytes(token))
        return c[0](key).decrypt(bytes(token))
    except (pure.PureCryptoError,) + ((c[1],) if c is not None else ()):
        raise SecAggError("an encrypted key share does not decrypt with the key agreed with its sender") from None


def plaintext_concat(src: int, dst: int, b_share: bytes, sk_share: bytes) -> bytes:
    """flwr's ``share_keys_plaintext_concat``."""
    return b"".join([int(src).to_bytes(8, "little"), int(dst).to_bytes(8, "little"),
                     len(b_share).to_bytes(4, "little"), b_share, sk_share])


def plaintext_separate(plaintext: bytes) -> Tuple[int, int, bytes, bytes]:
    """flwr's ``share_keys_plaintext_separate``: (src, dst, seed share, key share)."""
    if len(plaintext) < 20:
        raise SecAggError("a decrypted key share is %d bytes, shorter than its header" % len(plaintext))
    mark = int.from_bytes(plaintext[16:20], "little")
    return (int.from_bytes(plaintext[:8], "little"), int.from_bytes(plaintext[8:16], "little"),
            plaintext[20:20 + mark], plaintext[20 + mark:])


# -- Shamir over GF(2^128), PyCryptodome's Shamir.split(ssss=False) -----------------------------------------
_IRR = (1 << 128) | 0x87  # x^128 + x^7 + x^2 + x + 1


def _gf_mul(a: int, b: int) -> int:
    z = 0
    while b:
        if b & 1:
            z ^= a
        a <<= 1
        if a >> 128:
            a ^= _IRR
        b >>= 1
    return z


def _split16(threshold: int, num: int, chunk: bytes) -> List[bytes]:
    """Shares 1..num of a 16-byte chunk: a random polynomial of degree threshold-1 whose constant
    term is the chunk (big-endian), evaluated at x = 1..num (Horner, highest coefficient first)."""
    coeffs = [int.from_bytes(os.urandom(16), "big") for _ in range(threshold - 1)] + [int.from_bytes(chunk, "big")]
    out = []
    for x in range(1, num + 1):
        y = 0
        for c in coeffs:
            y = _gf_mul(x, y) ^ c
        out.append(y.to_bytes(16, "big"))
    return out


def create_shares(secret: bytes, threshold: int, num: int) -> List[bytes]:
    """flwr's ``create_shares``: PKCS#7-pad to 16 bytes, split each block; share i is
    ``<i as 4 bytes little-endian><its share of block 1>...``."""
    pad = 16 - len(secret) % 16
    padded = bytes(secret) + bytes([pad]) * pad
    shares = [bytearray(i.to_bytes(4, "little")) for i in range(1, num + 1)]
    for k in range(0, len(padded), 16):
        for i, s in enumerate(_split16(threshold, num, padded[k:k + 16])):
            shares[i] += s
    return [bytes(s) for s in shares]


# -- masks and quantization ------------------------------------------------------------------------------
def pseudo_rand_gen(seed: bytes, num_range: int, shapes: Sequence[Tuple[int, ...]]) -> List[np.ndarray]:
    """flwr's ``pseudo_rand_gen``: the seed's 4-byte little-endian words XORed seed a RandomState."""
    if len(seed) % 4:
        raise SecAggError("a mask seed must be a multiple of 4 bytes, got %d" % len(seed))
    seed32 = 0
    for i in range(0, len(seed), 4):
        seed32 ^= int.from_bytes(seed[i:i + 4], "little")
    gen = np.random.RandomState(seed32)
    return [np.array(gen.randint(0, num_range - 1, dtype=np.int64), dtype=np.int64) if len(s) == 0
            else gen.randint(0, num_range - 1, s, dtype=np.int64) for s in shapes]


def quantize(arrays: Sequence[np.ndarray], clipping_range: float, target_range: int) -> List[np.ndarray]:
    """flwr's ``quantize``: clip to +-clipping_range, shift, scale to [0, target_range], round stochastically."""
    q = target_range / (2 * clipping_range)
    out = []
    for a in arrays:
        pre = (np.clip(np.asarray(a, dtype=np.float64), -clipping_range, clipping_range) + clipping_range) * q
        up = np.ceil(pre)
        r = up.astype(np.int64)
        r -= (np.random.random_sample(np.shape(r)) < (up - pre)).astype(np.int64)
        out.append(r)
    return out
