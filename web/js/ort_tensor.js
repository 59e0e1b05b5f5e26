// onnxruntime-common 1.19's Tensor for pytrain-ort.js: a CPU tensor (type, data, dims, size, location),
// reshape, getData, dispose, and the image conversions Tensor.fromImage / toImageData / toDataURL with
// onnxruntime-common 1.19's semantics (its lib/tensor-factory-impl.ts and tensor-conversion-impl.ts).

/** onnxruntime-common's Tensor.Type -> typed array (float16 as Uint16Array bits, as onnxruntime-common has it). */
export const TYPED_ARRAYS = {
  float32: Float32Array, float64: Float64Array, int8: Int8Array, uint8: Uint8Array, int16: Int16Array,
  uint16: Uint16Array, float16: Uint16Array, int32: Int32Array, uint32: Uint32Array, int64: BigInt64Array,
  uint64: BigUint64Array,
  bool: Uint8Array, string: Array,
};

function typeOfArray(data) {
  if (data instanceof Float32Array) return "float32";
  if (data instanceof Float64Array) return "float64";
  if (data instanceof Int8Array) return "int8";
  if (data instanceof Uint8Array || data instanceof Uint8ClampedArray) return "uint8";
  if (data instanceof Int16Array) return "int16";
  if (data instanceof Uint16Array) return "uint16";
  if (data instanceof Int32Array) return "int32";
  if (data instanceof Uint32Array) return "uint32";
  if (data instanceof BigInt64Array) return "int64";
  if (data instanceof BigUint64Array) return "uint64";
  return null;
}

/** A CPU tensor with onnxruntime-common's basics: type, data, dims, size, location. */
export class Tensor {
  /**
   * new Tensor(type, data, dims?) or new Tensor(data, dims?): data is a typed array matching the type,
   * or a plain array (numbers, bigints, booleans or strings) that is converted.
   */
  constructor(arg0, arg1, arg2) {
    let type, data, dims;
    if (typeof arg0 === "string") {
      type = arg0; data = arg1; dims = arg2;
      const T = TYPED_ARRAYS[type];
      if (!T) throw new TypeError(`Unsupported tensor type: ${type}.`);
      if (Array.isArray(data)) {
        if (type === "string") { /* kept as an array of strings */ }
        else if (type === "int64" || type === "uint64") data = T.from(data, (v) => BigInt(v));
        else if (type === "bool") data = Uint8Array.from(data, (v) => (v ? 1 : 0));
        else data = T.from(data);
      } else if (type === "uint8" && data instanceof Uint8ClampedArray) {
        data = new Uint8Array(data.buffer, data.byteOffset, data.length);
      } else if (!(data instanceof T)) {
        throw new TypeError(`A ${T.name} tensor's data must be type of ${T.name}`);
      }
    } else {
      data = arg0; dims = arg1;
      if (Array.isArray(data)) {
        if (data.length === 0) throw new TypeError("Tensor type cannot be inferred from an empty array.");
        const first = data[0];
        if (typeof first === "string") type = "string";
        else if (typeof first === "boolean") { type = "bool"; data = Uint8Array.from(data, (v) => (v ? 1 : 0)); }
        else { type = "float32"; data = Float32Array.from(data); }
      } else {
        type = typeOfArray(data);
        if (!type) throw new TypeError("Invalid tensor data: expected a typed array or an array");
        if (data instanceof Uint8ClampedArray) data = new Uint8Array(data.buffer, data.byteOffset, data.length);
      }
    }
    if (dims === undefined) dims = [data.length];
    else if (!Array.isArray(dims)) throw new TypeError("A tensor's dims must be a number array");
    dims = dims.map((d) => {
      if (!Number.isSafeInteger(d) || d < 0) throw new TypeError(`Invalid dimension: ${d}`);
      return d;
    });
    const size = dims.reduce((a, b) => a * b, 1);
    if (size !== data.length) throw new Error(`Tensor's size(${size}) does not match data length(${data.length}).`);
    this.type = type;
    this.dims = dims;
    this.data = data;
    this.size = size;
    this.location = "cpu";
  }

  get cpuData() { return this.data; }

  /** As in onnxruntime-common: a CPU tensor has no WebGL texture nor WebGPU buffer. */
  get texture() { throw new Error("The data is not stored as a WebGL texture."); }
  get gpuBuffer() { throw new Error("The data is not stored as a WebGPU buffer."); }

  async getData(releaseData) {
    const d = this.data;
    if (releaseData) this.dispose();
    return d;
  }

  reshape(dims) { return new Tensor(this.type, this.data, dims); }

  dispose() { this.data = undefined; this.location = "none"; }

  /** The image tensor as ImageData (onnxruntime-common 1.19's tensorToImageData). */
  toImageData(options) { return tensorToImageData(this, options); }

  /** The image tensor as a PNG data URL (its toImageData drawn on a canvas). */
  toDataURL(options) {
    const image = tensorToImageData(this, options);
    const canvas = newCanvas(image.width, image.height);
    canvas.getContext("2d").putImageData(image, 0, 0);
    if (!("toDataURL" in canvas)) throw new Error("toDataURL is not supported");
    return canvas.toDataURL();
  }

  /** Tensor.fromImage(ImageData | HTMLImageElement | ImageBitmap | canvas | URL string, options?). */
  static fromImage(image, options) { return tensorFromImage(image, options); }

  /** A CPU tensor over the buffer (onnxruntime-web pins nothing either when it runs on the CPU). */
  static fromPinnedBuffer(type, buffer, dims) {
    const t = new Tensor(type, buffer, dims);
    t.location = "cpu-pinned";
    return t;
  }

  static fromTexture() { throw new TypeError("pytrain-ort.js has no WebGL tensors: give a CPU Tensor"); }

  static fromGpuBuffer() { throw new TypeError("pytrain-ort.js has no WebGPU tensors: give a CPU Tensor"); }
}

// ---------------------------------------------------------------------- images

function newCanvas(width, height) {
  if (typeof document !== "undefined") {
    const c = document.createElement("canvas");
    c.width = width; c.height = height;
    return c;
  }
  if (typeof OffscreenCanvas !== "undefined") return new OffscreenCanvas(width, height);
  throw new Error("Canvas is not supported");
}

function context2d(canvas) {
  const ctx = canvas.getContext("2d");
  if (!ctx) throw new Error("Can not access image data");
  return ctx;
}

/** norm {mean, bias} as four per-channel values each; fromImage's defaults mean 255, bias 0 (and for a
 * 3-value array, the alpha channel's 255 and 0). */
function normOf(norm, meanAlpha, biasAlpha) {
  const four = (v, dflt, alpha) => {
    if (v === undefined) return [dflt, dflt, dflt, dflt];
    if (typeof v === "number") return [v, v, v, v];
    if (!Array.isArray(v) || v.length < 3) throw new TypeError("norm.mean and norm.bias are a number or 3 or 4 numbers");
    return [v[0], v[1], v[2], v[3] ?? alpha];
  };
  return { mean: four(norm && norm.mean, 255, meanAlpha), bias: four(norm && norm.bias, 0, biasAlpha) };
}

/** onnxruntime-common 1.19's bufferToTensor: RGBA or RGB pixels -> a float32 [1, C, H, W] tensor,
 * (pixel + bias) / mean per channel; tensorFormat RGB (default), RGBA, BGR or RBG. */
function bufferToTensor(buffer, options) {
  if (options.height === undefined || options.width === undefined) throw new Error("Image height and width must be defined");
  if (options.tensorLayout === "NHWC") throw new Error("NHWC Tensor layout is not supported yet");
  const { height, width } = options;
  const { mean, bias } = normOf(options.norm, 255, 0);
  const inputFormat = options.format !== undefined ? options.format : "RGBA";
  const outputFormat = options.tensorFormat !== undefined ? options.tensorFormat : "RGB";
  const stride = height * width;
  const channels = outputFormat === "RGBA" ? 4 : 3;
  const out = new Float32Array(stride * channels);
  const step = inputFormat === "RGB" ? 3 : 4;
  const hasAlpha = inputFormat !== "RGB" && outputFormat === "RGBA";
  let [r, g, b] = [0, stride, stride * 2];
  if (outputFormat === "RBG") [r, b, g] = [0, stride, stride * 2];
  else if (outputFormat === "BGR") [b, g, r] = [0, stride, stride * 2];
  let a = stride * 3;
  for (let i = 0, p = 0; i < stride; i++, p += step) {
    out[r++] = (buffer[p] + bias[0]) / mean[0];
    out[g++] = (buffer[p + 1] + bias[1]) / mean[1];
    out[b++] = (buffer[p + 2] + bias[2]) / mean[2];
    if (hasAlpha) out[a++] = (buffer[p + 3] + bias[3]) / mean[3];
  }
  return new Tensor("float32", out, [1, channels, height, width]);
}

function isCanvas(x) {
  return (typeof HTMLCanvasElement !== "undefined" && x instanceof HTMLCanvasElement) ||
         (typeof OffscreenCanvas !== "undefined" && x instanceof OffscreenCanvas);
}

/** The RGBA pixels of a drawable (image, bitmap, canvas) drawn at its own size, read (w x h) from the corner. */
function pixelsOf(source, width, height, w = width, h = height) {
  const ctx = context2d(newCanvas(width, height));
  ctx.drawImage(source, 0, 0);
  return ctx.getImageData(0, 0, w, h).data;
}

function loadImage(url) {
  return new Promise((resolve, reject) => {
    const img = new Image();
    img.crossOrigin = "Anonymous";
    img.onload = () => resolve(img);
    img.onerror = () => reject(new Error(`Tensor.fromImage: the image ${url} could not be loaded`));
    img.src = url;
  });
}

/**
 * onnxruntime-common 1.19's Tensor.fromImage. Its semantics, kept: the result is float32 [1, C, H, W]
 * (dataType is not read; NHWC is refused); resizedWidth/resizedHeight (both) read that many pixels from
 * the top-left corner of an HTMLImageElement or ImageData drawn at its own size (a crop, not a scaling);
 * an HTMLImageElement gives RGBA and takes no tensorFormat; an ImageBitmap needs options. pytrain adds:
 * a canvas (HTMLCanvasElement / OffscreenCanvas) as a source, read like an ImageBitmap, and a norm with
 * only mean or only bias (the other keeps its default).
 */
export async function tensorFromImage(image, options) {
  const opts = Object.assign({}, options || {});
  const resized = options !== undefined && options.resizedWidth !== undefined && options.resizedHeight !== undefined;
  if (typeof HTMLImageElement !== "undefined" && image instanceof HTMLImageElement) {
    if (opts.tensorFormat !== undefined) throw new Error("Image input config format must be RGBA for HTMLImageElement");
    const width = resized ? options.resizedWidth : image.width, height = resized ? options.resizedHeight : image.height;
    Object.assign(opts, { tensorFormat: "RGBA", width, height });
    return bufferToTensor(pixelsOf(image, image.width, image.height, width, height), opts);
  }
  if (typeof ImageData !== "undefined" && image instanceof ImageData) {
    const width = resized ? options.resizedWidth : image.width, height = resized ? options.resizedHeight : image.height;
    Object.assign(opts, { format: "RGBA", width, height });
    let data = image.data;
    if (options !== undefined) {
      const ctx = context2d(newCanvas(width, height));
      ctx.putImageData(image, 0, 0);
      data = ctx.getImageData(0, 0, width, height).data;
    }
    return bufferToTensor(data, opts);
  }
  const bitmap = typeof ImageBitmap !== "undefined" && image instanceof ImageBitmap;
  if (bitmap || isCanvas(image)) {
    if (bitmap && options === undefined) throw new Error("Please provide image config with format for Imagebitmap");
    Object.assign(opts, { width: image.width, height: image.height });
    return bufferToTensor(pixelsOf(image, image.width, image.height), opts);
  }
  if (typeof image === "string") {
    const img = await loadImage(image);
    Object.assign(opts, { width: img.width, height: img.height });
    return bufferToTensor(pixelsOf(img, img.width, img.height), opts);
  }
  throw new Error("Input data provided is not supported - aborted tensor creation");
}

/** onnxruntime-common 1.19's tensorToImageData: an image tensor (NCHW, or NHWC dims) -> ImageData,
 * (value - bias) * mean per channel (mean 255 and bias 0 by default), alpha 255 unless format is RGBA. */
export function tensorToImageData(tensor, options) {
  const nhwc = options !== undefined && options.tensorLayout === "NHWC";
  const [width, height, channels] = nhwc ? [tensor.dims[2], tensor.dims[1], tensor.dims[3]]
                                         : [tensor.dims[3], tensor.dims[2], tensor.dims[1]];
  const format = options !== undefined && options.format !== undefined ? options.format : "RGB";
  const { mean, bias } = normOf(options && options.norm, 255, 0);
  if (options !== undefined && ((options.format !== undefined && channels === 4 && options.format !== "RGBA") ||
                                (channels === 3 && options.format !== "RGB" && options.format !== "BGR"))) {
    throw new Error("Tensor format doesn't match input tensor dims");
  }
  const stride = height * width;
  let [r, g, b] = [0, stride, stride * 2];
  if (format === "RBG") [r, b, g] = [0, stride, stride * 2];
  let a = format === "RGBA" ? stride * 3 : -1;
  const image = context2d(newCanvas(1, 1)).createImageData(width, height);
  const px = image.data, d = tensor.data;
  for (let i = 0, p = 0; i < stride; i++, p += 4) {
    px[p] = (d[r++] - bias[0]) * mean[0];
    px[p + 1] = (d[g++] - bias[1]) * mean[1];
    px[p + 2] = (d[b++] - bias[2]) * mean[2];
    px[p + 3] = a === -1 ? 255 : (d[a++] - bias[3]) * mean[3];
  }
  return image;
}
