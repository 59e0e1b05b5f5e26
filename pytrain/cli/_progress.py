"""Progress on stderr: a redrawn bar on a terminal, a few plain lines otherwise (logs, CI)."""
from __future__ import annotations

import sys
import time
from typing import IO, Optional


def _clock(seconds: float) -> str:
    seconds = int(max(0, seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return "{}:{:02d}:{:02d}".format(h, m, s) if h else "{}:{:02d}".format(m, s)


class Progress:
    """Per-epoch progress: steps/s, running loss and ETA of the epoch.

    Not on a terminal, a plain line every ``plain_every`` seconds: quick epochs print none, and
    the per-epoch summary on stdout tells the rest.
    """

    plain_every = 10.0

    def __init__(self, stream: Optional[IO[str]] = None, enabled: bool = True, width: int = 24) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.width = width
        self._last_draw = 0.0
        self._last_plain = 0.0

    def start(self, label: str, total: int, done: int = 0) -> None:
        self.label, self.total, self.first = label, total, done
        self.t0 = time.monotonic()
        self._last_plain = self.t0

    def update(self, done: int, loss: float) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        run = done - self.first
        rate = run / (now - self.t0) if now > self.t0 and run else 0.0
        eta = (self.total - done) / rate if rate else 0.0
        if self.tty:
            if now - self._last_draw < 0.1 and done < self.total:
                return
            self._last_draw = now
            filled = int(self.width * done / max(1, self.total))
            bar = "#" * filled + "." * (self.width - filled)
            self.stream.write("\r{} [{}] {}/{}  {:.1f} steps/s  loss {:.4f}  ETA {}\x1b[K".format(
                self.label, bar, done, self.total, rate, loss, _clock(eta)))
            self.stream.flush()
        elif now - self._last_plain >= self.plain_every and done < self.total:
            self._last_plain = now
            self.stream.write("{} {}/{} steps  {:.1f} steps/s  loss {:.4f}  ETA {}\n".format(
                self.label, done, self.total, rate, loss, _clock(eta)))
            self.stream.flush()

    def finish(self) -> None:
        """Clear the bar so the epoch summary line starts clean."""
        if self.enabled and self.tty:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
