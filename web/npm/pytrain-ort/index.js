// pytrain-ort for bundlers (webpack, vite, ...): after `npm install <site>/npm/pytrain-ort` a page that was
// written for onnxruntime-web imports `import * as ort from "pytrain-ort"` (was "onnxruntime-web/training").
// The module itself is loaded at run time from the pytrain site, whose Web Worker must be same-origin with the
// page: from the origin's root ("/pytrain-ort.js") unless globalThis.PYTRAIN_SITE (a URL ending in "/") says
// where the site is. The site build writes this package's package.json and index.d.ts (pytrain-ort.d.ts).
const site = new URL(typeof globalThis.PYTRAIN_SITE === "string" ? globalThis.PYTRAIN_SITE : "/", globalThis.location.href);
const ort = await import(/* webpackIgnore: true */ /* @vite-ignore */ new URL("pytrain-ort.js", site).href);

export const { TrainingSession, InferenceSession, Tensor, env } = ort;
export default ort.default;
