// The page's one store (TodoMVC style): the state the panels read, and the events they talk
// through, so that no panel imports another. A panel that changes the model or the data says so
// here (setModel, setData, emit); the panels that show something of it subscribe (on).
// The state is window.pytrainApp too: the browser tests (and curious users) read it.

import { client } from "./start.js";   // the page's worker, started before the panels load

export { client };

export const app = {
  client,
  ready: false,
  data: null,            // data summary from the worker
  model: null,           // model summary from the worker
  training: false,
  paused: false,
  step: 0,
  epoch: 0,
  rebuild: null,         // how to rebuild the current model with another optimizer (before step 1)
  lastPrediction: null,  // {input, probabilities, label}
  saved: null,           // last "saved" event
  saveEveryMs: null,     // a running run is also saved this often within an epoch (a reload resumes there); unset:
                         // Python's (pytrain.webapp.run_options.TabRun.save_every_ms), tests set it shorter
  epochs: [],            // per-epoch validation records
  resumed: null,         // result of the last resume
  onnxUpload: null,      // {name, bytes, extraFiles, params: its weights, layers} of the uploaded inference model
  announced: [],         // what the live region said, in order (for the tests)
  drawn: [],             // digits the user drew and added ({x, y}), kept when the digits model is rebuilt
  errors: [],
  textSamples: [],       // what the "Your text" model said ({kind, step, prompt, continuation | predictions}), in order
  busy: 0,               // UI actions under way (ui.js guarded): with client.pendingCalls, what the tests wait out
  history: { losses: [], epochs: [] },
  tab: "digits",         // the setup tab shown
  // ms since navigation start (performance.now()): Python ready, first training step reported
  timing: { ready: null, firstStep: null },
  // Filled by the panels that own them: examples and backbone ("By example"), learned (4 · What it
  // learned), federation (5), and views for the tests: lossPoints(), lossPlotLog(), plots, padEmpty().
};
window.pytrainApp = app;

// ------------------------------------------------------------------ events

/**
 * The page's events (besides the worker's, on `client`):
 *   model     (model)     a new model: what was shown of the previous one goes
 *   data      (data)      the data changed (loaded, or samples added)
 *   runBack   (model)     a run came back (resumed, or its run file taken back): its examples return
 *   history   (history)   the plots are rebuilt from a run's history ({losses, epochs})
 *   settings  (train)     a run's training settings come back ({epochs, batchSize, learningRate})
 *   trained   ()          the weights were trained: what the model learned is worth showing again
 *   tab       (name)      a setup tab was chosen ("digits", "table", "model", "examples", "text")
 */
const handlers = new Map();

/** Subscribe to one of the page's events; returns an unsubscribe function. */
export function on(type, fn) {
  if (!handlers.has(type)) handlers.set(type, new Set());
  handlers.get(type).add(fn);
  return () => handlers.get(type).delete(fn);
}

/** Tell the subscribers, in the order they subscribed; resolves when the async ones are done. */
export function emit(type, detail) {
  const results = Array.from(handlers.get(type) || [], (fn) => fn(detail));
  return Promise.all(results);
}

/** A new model (built, generated, uploaded, restored). */
export function setModel(model) {
  app.model = model;
  app.step = 0; app.epoch = 0;
  app.saved = null;
  emit("model", model);
}

/** New data, or samples added to it. */
export function setData(data) {
  app.data = data;
  emit("data", data);
}
