"""SecAgg+ without ``cryptography``: pytrain.flower.secagg_pure (P-384 keys and ECDH, HKDF-SHA256,
Fernet) against ``cryptography`` byte for byte, its refusals, and secagg_crypto taking it when the
package is absent; and the node's crypto steps handed to a driver that performs them (a browser tab
does, with WebCrypto: tests/browser/test_secagg_webcrypto.py, tests/browser/test_federation_secagg.py).
"""
from __future__ import annotations

import base64
import os
import sys

import pytest

from pytrain.flower import objects as ob
from pytrain.flower import secagg
from pytrain.flower import secagg_crypto as sc
from pytrain.flower import secagg_pure as sp

crypto = pytest.importorskip("cryptography")
from cryptography.fernet import Fernet  # noqa: E402
from cryptography.hazmat.primitives import hashes, hmac, padding  # noqa: E402
from cryptography.hazmat.primitives import serialization as ser  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes  # noqa: E402
from cryptography.hazmat.primitives.kdf.hkdf import HKDF  # noqa: E402


def without_cryptography(monkeypatch) -> None:
    """As if the package were not installed (a browser tab's Pyodide)."""
    for name in [m for m in sys.modules if m == "cryptography" or m.startswith("cryptography.")] + ["cryptography"]:
        monkeypatch.setitem(sys.modules, name, None)


def test_keys_and_ecdh_match_cryptography():
    for _ in range(4):
        sk = ec.generate_private_key(ec.SECP384R1())
        d = sk.private_numbers().private_value
        mine_sk = sp.private_pem(d)
        assert mine_sk == sk.private_bytes(ser.Encoding.PEM, ser.PrivateFormat.PKCS8, ser.NoEncryption())
        assert sp.public_pem(sp.multiply(d, sp.G)) == sk.public_key().public_bytes(
            ser.Encoding.PEM, ser.PublicFormat.SubjectPublicKeyInfo)
        # ECDH both ways: the fallback's key pair with the package's, and the package's with the fallback's
        their_sk, their_pk = sc.generate_key_pair()
        my_sk, my_pk = sp.generate_key_pair()
        theirs = ser.load_pem_private_key(their_sk, None).exchange(ec.ECDH(), ser.load_pem_public_key(my_pk))
        assert sp.ecdh(my_sk, their_pk) == theirs
        assert ser.load_pem_private_key(my_sk, None).exchange(ec.ECDH(), ser.load_pem_public_key(their_pk)) == theirs
    assert sp.multiply(sp.N, sp.G) is None  # the group order


def test_hkdf_and_fernet_match_cryptography():
    for n in (0, 1, 31, 48, 100):
        secret = os.urandom(n)
        for length in (16, 32, 80):
            want = HKDF(algorithm=hashes.SHA256(), length=length, salt=None, info=None).derive(secret)
            assert sp.hkdf_sha256(secret, length) == want
    key = Fernet.generate_key()
    raw = base64.urlsafe_b64decode(key)
    for n in (0, 1, 15, 16, 17, 200):
        data, iv, at = os.urandom(n), os.urandom(16), 1700000000 + n
        # the token from cryptography's own AES-128-CBC, PKCS7 and HMAC-SHA256, as the Fernet spec builds it
        pad = padding.PKCS7(128).padder()
        enc = Cipher(algorithms.AES(raw[16:]), modes.CBC(iv)).encryptor()
        parts = b"\x80" + at.to_bytes(8, "big") + iv + enc.update(pad.update(data) + pad.finalize()) + enc.finalize()
        mac = hmac.HMAC(raw[:16], hashes.SHA256())
        mac.update(parts)
        assert sp.fernet_encrypt(key, data, iv, at) == base64.urlsafe_b64encode(parts + mac.finalize())
        assert Fernet(key).decrypt(sp.fernet_encrypt(key, data)) == data
        assert sp.fernet_decrypt(key, Fernet(key).encrypt(data)) == data


def test_fallback_refuses_what_the_package_refuses(monkeypatch):
    key = sc.shared_key(sc.generate_key_pair()[0], sc.generate_key_pair()[1])
    token = bytearray(base64.urlsafe_b64decode(Fernet(key).encrypt(b"share")))
    token[30] ^= 1
    without_cryptography(monkeypatch)
    with pytest.raises(sc.SecAggError, match="does not decrypt"):
        sc.decrypt(key, base64.urlsafe_b64encode(bytes(token)))
    with pytest.raises(sc.SecAggError, match="does not decrypt"):
        sc.decrypt(key, b"not a token")
    off = sp.public_pem((sp.G[0], sp.G[1] + 1))  # a point off the curve
    for bad in (off, b"-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n", b"junk"):
        with pytest.raises(sc.SecAggError, match="P-384"):
            sc.load_public_key(bad)


def test_fallback_serves_when_cryptography_is_absent(monkeypatch):
    sk_a, pk_a = sc.generate_key_pair()
    sk_b, pk_b = sc.generate_key_pair()
    with_package = sc.shared_key(sk_a, pk_b), sc.shared_key(sk_b, pk_a)
    without_cryptography(monkeypatch)
    assert sc.cryptography_modules() is None
    assert (sc.shared_key(sk_a, pk_b), sc.shared_key(sk_b, pk_a)) == with_package
    sk_c, pk_c = sc.generate_key_pair()  # the fallback's own keys
    assert sc.decrypt(with_package[0], sc.encrypt(with_package[0], b"x" * 40)) == b"x" * 40
    assert sc.shared_key(sk_c, pk_a) == sc.shared_key(sk_a, pk_c)



def test_crypto_steps_go_to_the_driver_when_it_performs_them():
    """A browser tab's driver answers the node's CryptoSteps (WebCrypto); elsewhere Python performs them."""
    setup = {secagg.CONFIGS: ob.ConfigRecord([
        ("stage", "setup"), ("sample_num", 3), ("share_num", 3), ("threshold", 2), ("clipping_range", 8.0),
        ("target_range", 1 << 16), ("mod_range", 1 << 24), ("max_weight", 100.0)])}
    pairs = [sp.generate_key_pair(), sp.generate_key_pair()]
    steps = secagg.mod_steps({}, 1, 7, setup, None, (), crypto_outside=True)
    asked = [steps.send(None)]
    try:
        while True:
            asked.append(steps.send(list(pairs[len(asked) - 1])))
    except StopIteration as done:
        reply, _ = done.value
    assert [(s.op, s.args) for s in asked] == [("key_pair", ()), ("key_pair", ())]
    assert dict(reply[secagg.CONFIGS]) == {"pk1": pairs[0][1], "pk2": pairs[1][1]}
    with pytest.raises(StopIteration):  # performed here: nothing is asked
        next(secagg.mod_steps({}, 1, 7, setup, None, ()))
    refused = secagg.mod_steps({}, 1, 7, setup, None, (), crypto_outside=True)
    next(refused)
    with pytest.raises(sc.SecAggError, match="not P-384"):
        refused.throw(sc.SecAggError("not P-384"))
