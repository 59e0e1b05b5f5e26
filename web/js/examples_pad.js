// "By example", the drawing pad as a source: one pad for the tab; what is drawn goes, as a picture,
// into the class chosen next to it (the same way a camera frame or a file does).

import { DrawPad } from "./draw.js";
import { $, guarded } from "./ui.js";
import { app } from "./store.js";

let pad = null;

/** Wire the pad; `add(i, canvas)` adds the canvas as an example of class i. */
export function initExamplesPad(add) {
  // strokes thick enough to survive the 32x32 the CNN from scratch sees
  pad = new DrawPad($("ex-pad"), { lineWidth: 0.09 });
  $("ex-pad-clear").onclick = () => pad.reset();
  $("ex-pad-add").onclick = () => guarded(null, async () => {
    if (pad.empty) throw new Error("Draw something on the pad first.");
    const i = parseInt($("ex-pad-class").value, 10);
    if (!(i >= 0 && i < app.examples.length)) throw new Error("Choose the class the drawing belongs to.");
    add(i, pad.canvas);
    pad.reset();
  }, $("ex-pad-add"));
}


/** Keep the "Add to" choice in step with the classes (their names and number), keeping the choice. */
export function padClasses(names) {
  const sel = $("ex-pad-class");
  if (Array.from(sel.options).map((o) => o.text).join("\n") === names.join("\n")) return;   // unchanged: leave it be
  const keep = sel.value;
  sel.innerHTML = "";
  names.forEach((name, i) => sel.add(new Option(name, String(i))));
  if (keep !== "" && parseInt(keep, 10) < names.length) sel.value = keep;
}
