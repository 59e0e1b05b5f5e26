/* The Python bridge: every command reaches pytrain as pytrain.webapp.call(session, method,
 * args_json, blobs). Binary values travel beside the JSON as {"$blob": i} placeholders. */
"use strict";

let pyCallProxy = null;     // Python's _pt_call, once the boot has made the session

/** Called by the boot once pytrain's Session exists. */
function connectPython(proxy) { pyCallProxy = proxy; }

function pythonReady() { return pyCallProxy !== null; }

const DTYPES = [
  [Float32Array, "<f4"], [Float64Array, "<f8"], [Int32Array, "<i4"], [Uint8Array, "|u1"],
  [Int8Array, "|i1"], [Uint16Array, "<u2"], [Int16Array, "<i2"], [Uint32Array, "<u4"],
];

/* Replace binary values in args by {"$blob": i} placeholders (see pytrain.webapp.call).
 * An ArrayBuffer or Uint8Array means bytes; {$array: TypedArray, shape} means a numpy array. */
function encodeArgs(value, blobs) {
  if (value instanceof ArrayBuffer) { blobs.push(new Uint8Array(value)); return { $blob: blobs.length - 1 }; }
  if (value instanceof Uint8Array) { blobs.push(value); return { $blob: blobs.length - 1 }; }
  if (value && value.$array !== undefined) {
    const arr = value.$array;
    const entry = DTYPES.find(([T]) => arr instanceof T);
    if (!entry) throw new Error("unsupported array type for Python: " + Object.prototype.toString.call(arr));
    blobs.push(new Uint8Array(arr.buffer, arr.byteOffset, arr.byteLength));
    return { $blob: blobs.length - 1, dtype: entry[1], shape: value.shape || [arr.length] };
  }
  if (ArrayBuffer.isView(value)) return encodeArgs({ $array: value }, blobs);
  if (Array.isArray(value)) return value.map((v) => encodeArgs(v, blobs));
  if (value && typeof value === "object") {
    const out = {};
    for (const [k, v] of Object.entries(value)) if (v !== undefined) out[k] = encodeArgs(v, blobs);
    return out;
  }
  return value;
}

function decodeResult(value, blobs) {
  if (Array.isArray(value)) return value.map((v) => decodeResult(v, blobs));
  if (value && typeof value === "object") {
    if (value.$blob !== undefined) return blobs[value.$blob];
    const out = {};
    for (const [k, v] of Object.entries(value)) out[k] = decodeResult(v, blobs);
    return out;
  }
  return value;
}

/* Synchronous call into the Python session; throws UserError with Python's message. */
/* Option names between JavaScript's camelCase and Python's snake_case, by one rule each way (an object's own
 * keys; unset values, undefined or null, are dropped on the way to Python, whose defaults fill them). */
function snakeName(k) { return k.replace(/[A-Z]/g, (c) => "_" + c.toLowerCase()); }

function snakeKeys(obj) {
  const out = {};
  for (const [k, v] of Object.entries(obj || {})) if (v !== undefined && v !== null) out[snakeName(k)] = v;
  return out;
}

/* A command's Python arguments: its fields `names`, each under its snake_case name or the one `renamed` gives
 * (bytes -> blob); an unset (undefined) field travels as nothing, null as None. */
function fields(names, renamed = {}) {
  return (args) => {
    const out = {};
    for (const n of names) if (args && args[n] !== undefined) out[renamed[n] || snakeName(n)] = args[n];
    return out;
  };
}

function camelKeys(obj) {
  const out = {};
  for (const [k, v] of Object.entries(obj || {})) out[k.replace(/_([a-z])/g, (_, c) => c.toUpperCase())] = v;
  return out;
}

function py(method, args) {
  if (!pyCallProxy) throw new UserError("pytrain is still loading", "NotReady");
  const blobs = [];
  const argsJSON = JSON.stringify(encodeArgs(args || {}, blobs));
  const res = pyCallProxy(method, argsJSON, blobs);
  let pair;
  try { pair = res.toJs(); } finally { res.destroy(); }
  const [text, outBlobs] = pair;
  // toJs() views may point into the wasm heap: copy before Python frees or the heap grows.
  const copies = Array.from(outBlobs, (b) => new Uint8Array(b).slice());
  const reply = JSON.parse(text);
  if (!reply.ok) {
    if (reply.error.trace) console.error(reply.error.trace);
    const err = new UserError(reply.error.message, reply.error.type);
    err.expected = reply.error.expected;
    throw err;
  }
  return decodeResult(reply.result, copies);
}
