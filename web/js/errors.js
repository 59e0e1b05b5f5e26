// The page's one error box (#error in index.html): every error shows through it, next to the
// control that caused it. Panels redraw parts of themselves (the "By example" classes, the ONNX
// parameter list, the Try results...): the box is only ever put beside an element that was in
// index.html, in a parent that was too, so no redraw takes it with it; and should some redraw
// still drop it, it goes back under the page header, as it was.

import { app } from "./store.js";

const box = document.getElementById("error");
const text = document.getElementById("error-text");
const home = document.getElementById("notices");
const fromPage = new WeakSet(document.querySelectorAll("body *"));   // what index.html has, before any panel draws
const DYNAMIC = "#ex-classes, #onnx-params, #prediction, #picture-prediction, #image-pad-prediction, #row-result, #plot-table, select";
let near = null;

/** The element the box goes after for a control: its row (or the control itself), if the page drew it. */
function anchorFor(control) {
  const host = control && control.closest ? control.closest("fieldset, .tab, .card") : null;
  if (!host) return null;
  let el = control.closest(".draw, .row, label.file") || control;
  // a control a panel drew (a class's "Add files"): the box goes after the panel's drawn area instead
  const drawn = el.closest(DYNAMIC);
  if (drawn) el = drawn;
  while (el && !(fromPage.has(el) && fromPage.has(el.parentElement) && !el.parentElement.closest(DYNAMIC))) el = el.parentElement;
  return el && host.contains(el) ? el : null;
}

/**
 * Show an error where the action was: the box moves next to the control (inside its fieldset, tab
 * or card), scrolls into view and takes the focus. Without a control (e.g. Python failed to load)
 * it stays under the page header.
 */
export function showError(err, control = null) {
  const msg = (err && err.message) || String(err);
  app.errors.push(msg);
  const anchor = anchorFor(control);
  if (anchor) anchor.after(box);
  else home.prepend(box);
  near = control && control.isConnected ? control : null;
  text.textContent = msg;
  box.hidden = false;
  // centred, or from its top when it is taller than the window (its first line is what to read)
  box.scrollIntoView({ block: box.offsetHeight > window.innerHeight * 0.8 ? "start" : "center" });
  box.focus({ preventScroll: true });
}

/** Hide the box (a new action starts). */
export function hideError() {
  box.hidden = true;
}

document.getElementById("error-close").onclick = () => {
  hideError();
  if (near && near.isConnected && !near.disabled) near.focus();
};

// the safety net: a redraw that removed the box puts it back under the header, showing what it showed
new MutationObserver(() => { if (!box.isConnected) home.prepend(box); })
  .observe(document.body, { childList: true, subtree: true });
