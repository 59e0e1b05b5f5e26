// Pictures as the image models see them: the camera (one for the page), and the pixels of any
// image source as float32 [C, H, W] in [0, 1]. Used by "By example" and by "Try the model".

import { $ } from "./ui.js";

export const SHAPE = [3, 32, 32];   // what the CNN from scratch sees: 32x32 colour
let stream = null;
export const video = document.createElement("video");   // never shown: frames are drawn onto #cam-view
video.muted = true;
video.playsInline = true;

export function cameraIsOn() { return stream !== null; }

/** Turn the camera on (once); resolves when frames arrive. */
export async function cameraOn() {
  if (stream) return;
  if (!navigator.mediaDevices || !navigator.mediaDevices.getUserMedia) throw new Error("This browser gives the page no camera (it needs https or localhost).");
  try {
    stream = await navigator.mediaDevices.getUserMedia({ video: { width: 320, height: 240 }, audio: false });
  } catch (e) {
    throw new Error(`The camera could not be opened (${e.name || e.message}); allow it for this page, or add pictures from files.`);
  }
  video.srcObject = stream;
  await video.play();
  const view = $("cam-view");
  const paint = () => { if (stream) { view.getContext("2d").drawImage(video, 0, 0, view.width, view.height); requestAnimationFrame(paint); } };
  paint();
  $("cam-start").textContent = "Camera on";
  $("cam-start").disabled = true;
}

/** Pixels of an image source (video, image bitmap, canvas) as float32 [C, H, W] in [0, 1]. */
export function pixels(source, shape = SHAPE) {
  const [c, h, w] = shape;
  const canvas = document.createElement("canvas");
  canvas.width = w; canvas.height = h;
  const ctx = canvas.getContext("2d", { willReadFrequently: true });
  ctx.drawImage(source, 0, 0, w, h);
  const px = ctx.getImageData(0, 0, w, h).data;
  const out = new Float32Array(c * h * w);
  for (let p = 0; p < h * w; p++) {
    const r = px[4 * p] / 255, g = px[4 * p + 1] / 255, b = px[4 * p + 2] / 255;
    if (c === 1) out[p] = 0.299 * r + 0.587 * g + 0.114 * b;
    else { out[p] = r; out[h * w + p] = g; out[2 * h * w + p] = b; }
  }
  return out;
}
