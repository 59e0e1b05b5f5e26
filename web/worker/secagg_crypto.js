/* SecAgg+'s public-key crypto with WebCrypto: the worker performs the node's crypto steps
 * (pytrain/flower/secagg_crypto.py, CryptoStep) with the bytes Python's `cryptography` makes:
 * P-384 key pairs as PEM as OpenSSL writes them (PKCS8 private, SubjectPublicKeyInfo public keys),
 * ECDH, HKDF-SHA256 (no salt, no info) to 32 bytes as a urlsafe base64 Fernet key, and Fernet
 * (AES-128-CBC with PKCS#7 padding, HMAC-SHA256; version 0x80, urlsafe base64).
 * tests/browser/test_secagg_webcrypto.py checks each against `cryptography` byte for byte. */
"use strict";

const SECAGG_CURVE = { name: "ECDH", namedCurve: "P-384" };
const FERNET_VERSION = 0x80;

/** A crypto step that cannot be answered (a key that is not P-384, a token that does not decrypt). */
class CryptoStepError extends Error {}

function b64(bytes) { let t = ""; for (const b of bytes) t += String.fromCharCode(b); return btoa(t); }

function unb64(text) {
  let raw;
  try { raw = atob(text.replace(/-/g, "+").replace(/_/g, "/")); } catch (e) { throw new CryptoStepError("not base64"); }
  return Uint8Array.from(raw, (c) => c.charCodeAt(0));
}

const urlsafe = (text) => text.replace(/\+/g, "-").replace(/\//g, "_");
const ascii = (text) => new TextEncoder().encode(text);

/** DER as a PEM block, as OpenSSL writes it (64 characters a line, a final newline). */
function pemText(label, der) {
  return `-----BEGIN ${label}-----\n${b64(der).match(/.{1,64}/g).join("\n")}\n-----END ${label}-----\n`;
}

function pemDer(label, bytes) {
  const m = new TextDecoder().decode(bytes).match(
    new RegExp(`^-----BEGIN ${label}-----\\n([A-Za-z0-9+/=\\n]+)-----END ${label}-----\\n?$`));
  if (!m) throw new CryptoStepError(`not a PEM ${label} block`);
  return unb64(m[1].replace(/\n/g, ""));
}

async function secaggKeyPair() {
  const pair = await crypto.subtle.generateKey(SECAGG_CURVE, true, ["deriveBits"]);
  return [ascii(pemText("PRIVATE KEY", new Uint8Array(await crypto.subtle.exportKey("pkcs8", pair.privateKey)))),
          ascii(pemText("PUBLIC KEY", new Uint8Array(await crypto.subtle.exportKey("spki", pair.publicKey))))];
}

/** ECDH: the shared x coordinate (48 bytes) of a private key's PEM and a peer's public key PEM. */
async function ecdhSecret(privatePem, publicPem) {
  const sk = await crypto.subtle.importKey("pkcs8", pemDer("PRIVATE KEY", privatePem), SECAGG_CURVE, false,
                                           ["deriveBits"]);
  let pk;
  try {
    pk = await crypto.subtle.importKey("spki", pemDer("PUBLIC KEY", publicPem), SECAGG_CURVE, false, []);
  } catch (e) {
    throw new CryptoStepError(`a public key from the server is not a P-384 PEM public key (${e.message})`);
  }
  return new Uint8Array(await crypto.subtle.deriveBits({ name: "ECDH", public: pk }, sk, 384));
}

/** HKDF-SHA256 with no salt and no info (the salt then is HashLen zeros, as an empty HMAC key is). */
async function hkdfSha256(secret, length) {
  const ikm = await crypto.subtle.importKey("raw", secret, "HKDF", false, ["deriveBits"]);
  return new Uint8Array(await crypto.subtle.deriveBits({ name: "HKDF", hash: "SHA-256", salt: new Uint8Array(0),
                                                         info: new Uint8Array(0) }, ikm, 8 * length));
}

/** flwr's generate_shared_key: ECDH, HKDF-SHA256 to 32 bytes, urlsafe base64 (a Fernet key). */
async function secaggSharedKey(privatePem, publicPem) {
  return ascii(urlsafe(b64(await hkdfSha256(await ecdhSecret(privatePem, publicPem), 32))));
}

/** A Fernet key's halves: the HMAC-SHA256 key and the AES-128-CBC key. */
async function fernetKeys(key) {
  const raw = unb64(new TextDecoder().decode(key));
  if (raw.length !== 32) throw new CryptoStepError("a Fernet key must be 32 bytes");
  return [await crypto.subtle.importKey("raw", raw.slice(0, 16), { name: "HMAC", hash: "SHA-256" }, false,
                                        ["sign", "verify"]),
          await crypto.subtle.importKey("raw", raw.slice(16), "AES-CBC", false, ["encrypt", "decrypt"])];
}

async function fernetEncrypt(key, plaintext) {
  const [mac, aes] = await fernetKeys(key);
  const iv = crypto.getRandomValues(new Uint8Array(16));
  const ct = new Uint8Array(await crypto.subtle.encrypt({ name: "AES-CBC", iv }, aes, plaintext));
  const token = new Uint8Array(25 + ct.length + 32);
  const now = Math.floor(Date.now() / 1000);
  token[0] = FERNET_VERSION;
  new DataView(token.buffer).setUint32(1, Math.floor(now / 2 ** 32));
  new DataView(token.buffer).setUint32(5, now % 2 ** 32);
  token.set(iv, 9);
  token.set(ct, 25);
  const body = token.subarray(0, 25 + ct.length);
  token.set(new Uint8Array(await crypto.subtle.sign("HMAC", mac, body)), body.length);
  return ascii(urlsafe(b64(token)));
}

async function fernetDecrypt(key, token) {
  const [mac, aes] = await fernetKeys(key);
  const refused = () => new CryptoStepError(
    "an encrypted key share does not decrypt with the key agreed with its sender");
  let data;
  try { data = unb64(new TextDecoder().decode(token)); } catch (e) { throw refused(); }
  if (data.length < 57 || (data.length - 57) % 16 || data[0] !== FERNET_VERSION) throw refused();
  const body = data.subarray(0, data.length - 32);
  if (!await crypto.subtle.verify("HMAC", mac, data.subarray(body.length), body)) throw refused();
  try {
    return new Uint8Array(await crypto.subtle.decrypt({ name: "AES-CBC", iv: data.subarray(9, 25) }, aes,
                                                      data.subarray(25, body.length)));
  } catch (e) { throw refused(); }
}

const CRYPTO_STEPS = { key_pair: secaggKeyPair, shared_key: secaggSharedKey, encrypt: fernetEncrypt,
                       decrypt: fernetDecrypt };

/** A crypto step's answer: {result} or {crypto_error} (what StepDriver.next takes). */
async function cryptoStep(op, args) {
  const run = CRYPTO_STEPS[op];
  if (!run) return { crypto_error: `unknown crypto operation ${op}` };
  try {
    return { result: await run(...args) };
  } catch (e) {
    return { crypto_error: e instanceof CryptoStepError ? e.message : `WebCrypto refused ${op}: ${e.message || e}` };
  }
}

/** Whether this worker can do SecAgg+'s crypto (ECDH P-384, HKDF, AES-CBC, HMAC) with WebCrypto. */
const hasWebCrypto = () => !!(self.crypto && crypto.subtle);
