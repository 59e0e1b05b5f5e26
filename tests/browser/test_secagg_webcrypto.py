"""The tab's SecAgg+ crypto (web/worker/secagg_crypto.js, WebCrypto in the page's worker) against
``cryptography`` and pytrain.flower.secagg_crypto byte for byte: the tab's P-384 PEMs load in the
package (the public one as OpenSSL writes it), ECDH and HKDF give the package's bytes for the same
keys either way, Fernet tokens decrypt both ways (the tab's is Fernet's token for its IV and time),
and what the package refuses the tab refuses.
"""
from __future__ import annotations

import base64
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "tests" / "flower"), str(ROOT / "tests" / "helpers")]
from browser_helpers import app_worker, wait_ready  # noqa: E402
from test_federation import Tab  # noqa: E402

from pytrain.flower import secagg_crypto as sc  # noqa: E402
from pytrain.flower import secagg_pure as sp  # noqa: E402

pytest.importorskip("cryptography")
from cryptography.fernet import Fernet  # noqa: E402
from cryptography.hazmat.primitives import hashes  # noqa: E402
from cryptography.hazmat.primitives import serialization as ser  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from cryptography.hazmat.primitives.kdf.hkdf import HKDF  # noqa: E402

# runs a function of worker/secagg_crypto.js in the worker: bytes in and out as {b: base64}
CALL = """async ([fn, args]) => {
    const d = (v) => v && v.b !== undefined ? Uint8Array.from(atob(v.b), (c) => c.charCodeAt(0))
        : Array.isArray(v) ? v.map(d) : v;
    const e = (v) => v instanceof Uint8Array ? { b: b64(v) } : Array.isArray(v) ? v.map(e)
        : v && typeof v === 'object' ? Object.fromEntries(Object.entries(v).map(([k, x]) => [k, e(x)])) : v;
    return e(await self[fn](...d(args)));
}"""


def _enc(v):
    return {"b": base64.b64encode(v).decode()} if isinstance(v, bytes) else [_enc(x) for x in v] \
        if isinstance(v, list) else v


def _dec(v):
    if isinstance(v, dict):
        return base64.b64decode(v["b"]) if set(v) == {"b"} else {k: _dec(x) for k, x in v.items()}
    return [_dec(x) for x in v] if isinstance(v, list) else v


class Worker:
    """The page's worker, where the federation loop runs."""

    def __init__(self, tab: Tab) -> None:
        wait_ready(tab.page)
        self.w = app_worker(tab.page)

    def __call__(self, fn: str, *args):
        return _dec(self.w.evaluate(CALL, [fn, _enc(list(args))]))

    def step(self, op: str, *args: bytes) -> dict:
        """cryptoStep's answer: {result} or {crypto_error}."""
        return self("cryptoStep", op, list(args))


def test_webcrypto_matches_cryptography(browser, site_url):
    tab = Tab(browser, site_url)
    try:
        run = Worker(tab)
        assert run.w.evaluate("() => hasWebCrypto()")
        for _ in range(3):
            tab_sk, tab_pk = run("secaggKeyPair")
            sk = ser.load_pem_private_key(tab_sk, None)
            assert isinstance(sk, ec.EllipticCurvePrivateKey) and sk.curve.name == "secp384r1"
            # the public PEM is OpenSSL's, byte for byte, and belongs to the private key
            assert sk.public_key().public_bytes(ser.Encoding.PEM, ser.PublicFormat.SubjectPublicKeyInfo) == tab_pk
            py_sk, py_pk = sc.generate_key_pair()  # cryptography's (OpenSSL's PKCS8)
            secret = ser.load_pem_private_key(py_sk, None).exchange(ec.ECDH(), ser.load_pem_public_key(tab_pk))
            assert run("ecdhSecret", tab_sk, py_pk) == secret
            assert run("ecdhSecret", py_sk, tab_pk) == secret  # an OpenSSL PKCS8 imports in WebCrypto too
            for length in (16, 32, 80):
                want = HKDF(algorithm=hashes.SHA256(), length=length, salt=None, info=None).derive(secret)
                assert run("hkdfSha256", secret, length) == want
            key = sc.shared_key(py_sk, tab_pk)
            assert run("secaggSharedKey", tab_sk, py_pk) == key == base64.urlsafe_b64encode(
                HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=None).derive(secret))
        key = Fernet.generate_key()
        for n in (0, 1, 15, 16, 17, 200):
            data = os.urandom(n)
            token = run("fernetEncrypt", key, data)
            assert Fernet(key).decrypt(token) == data
            raw = base64.urlsafe_b64decode(token)  # Fernet's token for the tab's IV and time, byte for byte
            assert token == sp.fernet_encrypt(key, data, raw[9:25], int.from_bytes(raw[1:9], "big"))
            assert run("fernetDecrypt", key, Fernet(key).encrypt(data)) == data
        # the crypto steps as the federation loop answers them, and what they refuse
        tab_sk, tab_pk = run.step("key_pair")["result"]
        assert run.step("shared_key", tab_sk, py_pk) == {"result": sc.shared_key(py_sk, tab_pk)}
        bad = bytearray(base64.urlsafe_b64decode(Fernet(key).encrypt(b"share")))
        bad[30] ^= 1
        for token in (base64.urlsafe_b64encode(bytes(bad)), b"not a token"):
            assert "does not decrypt" in run.step("decrypt", key, token)["crypto_error"]
        off = sp.public_pem((sp.G[0], sp.G[1] + 1))  # a point off the curve
        for pem in (off, b"junk"):
            assert "P-384" in run.step("shared_key", py_sk, pem)["crypto_error"]
        assert not tab.rec.console_errors, tab.rec.console_errors
    finally:
        tab.close()
