// A drawing pad (mouse, pen, touch, keyboard) and MNIST-style preprocessing for digits.

/** White strokes on black, like MNIST. Calls onStroke() after each finished stroke. */
export class DrawPad {
  constructor(canvas, { lineWidth = 0.075, onStroke = () => {}, onClear = null } = {}) {
    this.canvas = canvas;
    this.ctx = canvas.getContext("2d", { willReadFrequently: true });
    this.lineWidth = lineWidth;   // fraction of the canvas width
    this.onStroke = onStroke;
    this.drawing = false;
    this.empty = true;
    this.clear();
    canvas.style.touchAction = "none";   // no scrolling while drawing on touch screens
    canvas.addEventListener("pointerdown", (e) => this._down(e));
    canvas.addEventListener("pointermove", (e) => this._move(e));
    for (const t of ["pointerup", "pointercancel", "pointerleave"]) canvas.addEventListener(t, (e) => this._up(e));
    // The keyboard draws too: Space lowers/lifts the pen, arrows move it, Enter predicts, Escape clears.
    this.onClear = onClear || (() => this.clear());
    this.pen = null;        // [x, y] of the keyboard pen, or null until used
    this.penDown = false;
    canvas.addEventListener("keydown", (e) => this._key(e));
  }

  _key(e) {
    const { width, height } = this.canvas;
    const step = (e.shiftKey ? 0.01 : 0.04) * width;
    const moves = { ArrowLeft: [-step, 0], ArrowRight: [step, 0], ArrowUp: [0, -step], ArrowDown: [0, step] };
    if (!this.pen) this.pen = [width / 2, height / 2];
    if (e.key === " " || e.key === "Spacebar") {
      this.penDown = !this.penDown;
      if (this.penDown) this._dot(this.pen);
    } else if (moves[e.key]) {
      const p = [Math.min(width, Math.max(0, this.pen[0] + moves[e.key][0])),
                 Math.min(height, Math.max(0, this.pen[1] + moves[e.key][1]))];
      if (this.penDown) this._line(this.pen, p);
      this.pen = p;
    } else if (e.key === "Enter") {
      this.penDown = false;
      this.onStroke();
    } else if (e.key === "Escape") {
      this.penDown = false;
      this.pen = null;
      this.onClear();
    } else return;
    e.preventDefault();
  }

  _line(a, b) {
    const ctx = this.ctx;
    ctx.strokeStyle = "#fff";
    ctx.lineCap = ctx.lineJoin = "round";
    ctx.lineWidth = this.lineWidth * this.canvas.width;
    ctx.beginPath(); ctx.moveTo(a[0], a[1]); ctx.lineTo(b[0], b[1]); ctx.stroke();
    this.empty = false;
  }

  clear() {
    this.ctx.fillStyle = "#000";
    this.ctx.fillRect(0, 0, this.canvas.width, this.canvas.height);
    this.empty = true;
  }

  /** A blank pad with the keyboard pen back in the middle, lifted: ready for the next drawing. */
  reset() {
    this.clear();
    this.pen = null;
    this.penDown = false;
  }

  _pos(e) {
    const r = this.canvas.getBoundingClientRect();
    return [(e.clientX - r.left) * (this.canvas.width / r.width), (e.clientY - r.top) * (this.canvas.height / r.height)];
  }

  _down(e) {
    e.preventDefault();
    this.canvas.setPointerCapture && this.canvas.setPointerCapture(e.pointerId);
    this.drawing = true;
    this.last = this._pos(e);
    this._dot(this.last);
  }

  _move(e) {
    if (!this.drawing) return;
    e.preventDefault();
    const p = this._pos(e);
    this._line(this.last, p);
    this.last = p;
  }

  _dot([x, y]) {
    this.ctx.fillStyle = "#fff";
    this.ctx.beginPath();
    this.ctx.arc(x, y, (this.lineWidth * this.canvas.width) / 2, 0, 2 * Math.PI);
    this.ctx.fill();
    this.empty = false;
  }

  _up() {
    if (!this.drawing) return;
    this.drawing = false;
    this.onStroke();
  }

  /** The drawing as MNIST-like 28x28 floats in [0, 1], or null when nothing is drawn. */
  toMNIST() {
    const { width, height } = this.canvas;
    const data = this.ctx.getImageData(0, 0, width, height).data;
    const gray = new Float32Array(width * height);
    for (let i = 0; i < gray.length; i++) gray[i] = data[4 * i] / 255;
    return mnistPreprocess(gray, width, height);
  }
}

/**
 * MNIST's own recipe: crop to the ink, scale the longer side to 20 px keeping the aspect ratio
 * (area averaging, so thin strokes stay grey rather than vanish), then place the result in a
 * 28x28 frame so that its centre of mass is at the centre.
 */
export function mnistPreprocess(gray, width, height, threshold = 0.05) {
  let x0 = width, y0 = height, x1 = -1, y1 = -1;
  for (let y = 0; y < height; y++) {
    for (let x = 0; x < width; x++) {
      if (gray[y * width + x] > threshold) {
        if (x < x0) x0 = x; if (x > x1) x1 = x;
        if (y < y0) y0 = y; if (y > y1) y1 = y;
      }
    }
  }
  if (x1 < 0) return null;
  const bw = x1 - x0 + 1, bh = y1 - y0 + 1;
  const scale = 20 / Math.max(bw, bh);
  const tw = Math.max(1, Math.round(bw * scale)), th = Math.max(1, Math.round(bh * scale));
  const small = new Float32Array(tw * th);
  const weight = new Float32Array(tw * th);
  for (let y = y0; y <= y1; y++) {
    const ty = Math.min(th - 1, Math.floor((y - y0) * scale));
    for (let x = x0; x <= x1; x++) {
      const tx = Math.min(tw - 1, Math.floor((x - x0) * scale));
      small[ty * tw + tx] += gray[y * width + x];
      weight[ty * tw + tx] += 1;
    }
  }
  let mass = 0, cx = 0, cy = 0;
  for (let y = 0; y < th; y++) {
    for (let x = 0; x < tw; x++) {
      const i = y * tw + x;
      const v = weight[i] ? small[i] / weight[i] : 0;
      small[i] = v;
      mass += v; cx += v * (x + 0.5); cy += v * (y + 0.5);
    }
  }
  cx /= mass; cy /= mass;
  const clamp = (v, lo, hi) => Math.max(lo, Math.min(hi, v));
  const ox = clamp(Math.round(14 - cx), 0, 28 - tw), oy = clamp(Math.round(14 - cy), 0, 28 - th);
  const out = new Float32Array(28 * 28);
  for (let y = 0; y < th; y++) for (let x = 0; x < tw; x++) out[(y + oy) * 28 + x + ox] = Math.min(1, small[y * tw + x]);
  return out;
}

/** Paint 28x28 floats (row-major, [0, 1]) onto a canvas, scaled up. */
export function paintDigit(canvas, pixels) {
  const ctx = canvas.getContext("2d");
  const img = ctx.createImageData(28, 28);
  for (let i = 0; i < 784; i++) {
    const v = pixels ? Math.round(pixels[i] * 255) : 0;
    img.data[4 * i] = img.data[4 * i + 1] = img.data[4 * i + 2] = v;
    img.data[4 * i + 3] = 255;
  }
  const tmp = document.createElement("canvas");
  tmp.width = tmp.height = 28;
  tmp.getContext("2d").putImageData(img, 0, 0);
  ctx.imageSmoothingEnabled = false;
  ctx.drawImage(tmp, 0, 0, canvas.width, canvas.height);
}
