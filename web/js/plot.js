// Small canvas line plots (no library): a loss curve and a per-epoch metric plot.

const COLORS = { grid: "#e3e6ea", axis: "#6b7280", text: "#374151" };

function niceTicks(lo, hi, count) {
  const span = hi - lo || 1;
  const raw = span / count;
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => span / s <= count) || 10 * mag;
  const ticks = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) ticks.push(+v.toPrecision(12));
  return ticks;
}

function fmt(v) {
  const a = Math.abs(v);
  if (a !== 0 && (a < 0.01 || a >= 1e5)) return v.toExponential(1);
  return String(+v.toPrecision(3));
}

/**
 * A line plot on a canvas. Series are {label, color, points: [[x, y], ...], markers, dashed}.
 * Redraws are throttled to animation frames and cost O(canvas width) whatever the point count.
 */
export class LinePlot {
  constructor(canvas, { title = "", xLabel = "", yRange = null, xRange = null, logY = false, integerX = false } = {}) {
    this.canvas = canvas;
    this.title = title;
    this.xLabel = xLabel;
    this.yRange = yRange;
    this.xRange = xRange;   // fixed [min, max] of x, or null to fit the data
    this.logY = logY;
    this.integerX = integerX;
    this.series = [];
    this.minInterval = 250;   // ms between redraws: live plots need no more, the main thread stays free
    this._frame = 0;
    this._last = 0;
    this._size = null;        // CSS size from the ResizeObserver, so rendering never forces a layout
    if (typeof ResizeObserver !== "undefined") {
      this._resize = new ResizeObserver((entries) => {
        const r = entries[entries.length - 1].contentRect;
        this._size = [r.width, r.height];
        this.draw();
      });
      this._resize.observe(canvas);
    }
  }

  setSeries(series) { this.series = series; this.draw(); }

  clear() { for (const s of this.series) s.points = []; this.draw(); }

  /** Schedule one redraw (coalesced, at most one every minInterval ms, on an animation frame). */
  draw() {
    if (this._frame) return;
    const raf = typeof requestAnimationFrame === "function" ? requestAnimationFrame : (f) => setTimeout(f, 16);
    const wait = Math.max(0, this._last + this.minInterval - performance.now());
    this._frame = setTimeout(() => raf(() => {
      this._frame = 0;
      this._last = performance.now();
      this._render();
    }), wait);
  }

  _render() {
    const c = this.canvas;
    const dpr = window.devicePixelRatio || 1;
    const [w, h] = this._size || [c.clientWidth || c.width, c.clientHeight || c.height];
    if (c.width !== Math.round(w * dpr) || c.height !== Math.round(h * dpr)) {
      c.width = Math.round(w * dpr); c.height = Math.round(h * dpr);
    }
    const ctx = c.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, w, h);
    ctx.font = "12px system-ui, sans-serif";
    const pad = { l: 46, r: 12, t: 24, b: 30 };
    let pw = w - pad.l - pad.r;
    const titleEnd = this.title ? pad.l + ctx.measureText(this.title).width + 16 : pad.l;
    const legend = this._legend(ctx, w, h, pad, titleEnd);   // may take lines under the plot (pad.b grows)
    const ph = h - pad.t - pad.b;
    if (pw <= 10 || ph <= 10) return;

    const all = this.series.flatMap((s) => s.points);
    ctx.fillStyle = COLORS.text;
    if (this.title) ctx.fillText(this.title, pad.l, 15);
    if (!all.length) {
      ctx.fillStyle = COLORS.axis;
      ctx.fillText("no data yet", pad.l + pw / 2 - 30, pad.t + ph / 2);
      return;
    }
    const ty = (y) => (this.logY ? Math.log10(Math.max(y, 1e-8)) : y);
    let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
    for (const [x, y] of all) {
      if (!Number.isFinite(y)) continue;
      x0 = Math.min(x0, x); x1 = Math.max(x1, x);
      y0 = Math.min(y0, ty(y)); y1 = Math.max(y1, ty(y));
    }
    if (this.yRange) [y0, y1] = this.yRange;
    if (this.xRange) { x0 = Math.min(x0, this.xRange[0]); x1 = Math.max(x1, this.xRange[1]); }
    if (x1 === x0) { x0 -= 1; x1 += 1; }
    if (this.series.some((s) => s.markers && s.points.length)) x1 += (x1 - x0) * 0.03;   // room for the last marker
    if (y1 === y0) { y0 -= 0.5; y1 += 0.5; }
    const yPad = this.yRange ? 0 : (y1 - y0) * 0.05;
    y0 -= yPad; y1 += yPad;
    // The y tick labels get the room they need, so they never run into the plot.
    const yTicks = niceTicks(y0, y1, 4);
    const yLabels = yTicks.map((t) => (this.logY ? fmt(Math.pow(10, t)) : fmt(t)));
    pad.l = Math.max(pad.l, 10 + Math.max(...yLabels.map((t) => ctx.measureText(t).width)));
    pw = w - pad.l - pad.r;
    if (pw <= 10) return;
    this.lastTicks = yLabels;
    const X = (x) => pad.l + ((x - x0) / (x1 - x0)) * pw;
    const Y = (y) => pad.t + (1 - (ty(y) - y0) / (y1 - y0)) * ph;

    // grid + labels
    ctx.strokeStyle = COLORS.grid; ctx.lineWidth = 1; ctx.fillStyle = COLORS.axis;
    yTicks.forEach((t, i) => {
      const py = pad.t + (1 - (t - y0) / (y1 - y0)) * ph;
      ctx.beginPath(); ctx.moveTo(pad.l, py); ctx.lineTo(pad.l + pw, py); ctx.stroke();
      ctx.fillText(yLabels[i], pad.l - 6 - ctx.measureText(yLabels[i]).width, py + 4);
    });
    this.lastXTicks = niceTicks(x0, x1, 5).filter((v) => !this.integerX || Number.isInteger(v));
    for (const t of this.lastXTicks) {
      const px = X(t);
      ctx.beginPath(); ctx.moveTo(px, pad.t); ctx.lineTo(px, pad.t + ph); ctx.stroke();
      ctx.fillText(fmt(t), px - 8, pad.t + ph + 16);
    }
    if (this.xLabel) ctx.fillText(this.xLabel, pad.l + pw - ctx.measureText(this.xLabel).width, pad.t + ph + 28);
    ctx.strokeStyle = COLORS.axis;
    ctx.strokeRect(pad.l, pad.t, pw, ph);

    // series: at most ~2 points per pixel column (min/max per bucket keeps spikes visible)
    ctx.save();
    ctx.beginPath(); ctx.rect(pad.l, pad.t, pw, ph); ctx.clip();
    for (const s of this.series) {
      const pts = s.points.filter((p) => Number.isFinite(p[1]));
      if (!pts.length) continue;
      ctx.strokeStyle = s.color; ctx.fillStyle = s.color; ctx.lineWidth = s.width || 1.5;
      ctx.setLineDash(s.dashed ? [5, 4] : []);
      ctx.beginPath();
      const buckets = Math.max(1, Math.floor(pw));
      if (pts.length > 2 * buckets) {
        let b = -1, lo = null, hi = null, first = true;
        const flush = () => {
          if (lo === null) return;
          const px = pad.l + b + 0.5;
          if (first) { ctx.moveTo(px, Y(lo)); first = false; } else ctx.lineTo(px, Y(lo));
          ctx.lineTo(px, Y(hi));
        };
        for (const [x, y] of pts) {
          const nb = Math.min(buckets - 1, Math.floor(((x - x0) / (x1 - x0)) * buckets));
          if (nb !== b) { flush(); b = nb; lo = hi = y; } else { lo = Math.min(lo, y); hi = Math.max(hi, y); }
        }
        flush();
      } else {
        pts.forEach(([x, y], i) => (i ? ctx.lineTo(X(x), Y(y)) : ctx.moveTo(X(x), Y(y))));
      }
      ctx.stroke();
      if (s.markers) for (const [x, y] of pts) { ctx.beginPath(); ctx.arc(X(x), Y(y), 3, 0, 2 * Math.PI); ctx.fill(); }
    }
    ctx.restore();
    ctx.setLineDash([]);
    legend.forEach(({ s, x, y }) => {   // outside the plot area, always inside the canvas
      ctx.fillStyle = s.color;
      ctx.fillRect(x, y - 5, 10, 3);
      ctx.fillStyle = COLORS.text;
      ctx.fillText(s.label, x + 14, y);
    });
  }

  /**
   * Where each legend entry goes ({s, x, y: text baseline}): right-aligned in the title row when
   * the row has room, else wrapped in lines under the x axis (a narrow phone screen), which
   * `pad.b` then makes room for. `legendBoxes` keeps the boxes (CSS px in the canvas) for tests.
   */
  _legend(ctx, w, h, pad, titleEnd) {
    const items = this.series.filter((s) => s.label && s.points.length)
      .map((s) => ({ s, w: Math.min(ctx.measureText(s.label).width + 14, w - 16) }));
    const gap = 12, lineH = 16, right = w - pad.r;
    const total = items.reduce((a, it) => a + it.w + gap, 0) - gap;
    const out = [];
    if (!items.length) { this.legendBoxes = []; return out; }
    if (titleEnd + total <= right) {
      let x = right - total;
      for (const it of items) { out.push({ s: it.s, x, y: pad.t - 7, w: it.w }); x += it.w + gap; }
    } else {
      const left = 8, lines = [[]];
      let x = left;
      for (const it of items) {
        if (x > left && x + it.w > right) { lines.push([]); x = left; }
        lines[lines.length - 1].push(it);
        x += it.w + gap;
      }
      pad.b += lines.length * lineH;
      lines.forEach((line, k) => {
        let lx = left;
        for (const it of line) { out.push({ s: it.s, x: lx, y: h - pad.b + 30 + (k + 1) * lineH - 4, w: it.w }); lx += it.w + gap; }
      });
    }
    this.legendBoxes = out.map((e) => ({ label: e.s.label, x: e.x, y: e.y - 11, w: e.w, h: 14 }));
    return out;
  }
}

/** Exponential moving average of [x, y] points (a readable trend over noisy mini-batch losses). */
export function smooth(points, alpha = 0.05) {
  const out = [];
  let m = null;
  for (const [x, y] of points) {
    m = m === null ? y : m + alpha * (y - m);
    out.push([x, m]);
  }
  return out;
}
