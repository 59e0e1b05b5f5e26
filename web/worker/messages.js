/* The worker's side of the protocol (js/protocol.js): replies and events to the page, and the
 * errors a command answers with. Loaded first by worker.js. */
"use strict";

const BASE = new URL("./", self.location.href).href;   // the site's folder (self.location is worker.js)

function post(msg, transfer) { self.postMessage(msg, transfer || []); }

/** An event to the page: one of pytrainProtocol.EVENTS. */
function emit(event, data) { post({ event, data: data === undefined ? null : data }); }

/** An error the user can act on (a bad upload, a busy worker): answered, not logged. */
class UserError extends Error {
  constructor(message, type) { super(message); this.type = type || "Error"; this.expected = true; }
}

/** The ErrorInfo of the protocol for any thrown value. */
function errorInfo(e) {
  return { type: e.type || e.name || "Error", message: e.message || String(e), expected: !!e.expected };
}
