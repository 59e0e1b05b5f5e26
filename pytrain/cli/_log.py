"""``--log``: per-step losses and per-epoch metrics as CSV or JSON lines, flushed as they come."""
from __future__ import annotations

import csv
import json
import os
from typing import Any, Dict, Optional

from pytrain.cli._common import CliError

COLUMNS = ("kind", "epoch", "step", "loss", "lr", "train_loss", "val_loss", "val_accuracy", "val_mae",
           "seconds")


def check_log_name(path: str) -> str:
    """The log's extension, or CliError when it is neither CSV nor JSON lines."""
    ext = os.path.splitext(path)[1].lower()
    if ext not in (".csv", ".jsonl", ".json", ".ndjson"):
        raise CliError("--log {}: use a .csv or .jsonl file name".format(path))
    return ext


class RunLog:
    """Append-or-truncate log file; ``.csv`` gets a header, ``.jsonl``/``.json`` one object per line."""

    def __init__(self, path: str, append: bool) -> None:
        ext = check_log_name(path)
        self.path = path
        self.csv = ext == ".csv"
        fresh = not append or not os.path.exists(path) or os.path.getsize(path) == 0
        try:
            self.f = open(path, "a" if append else "w", newline="" if self.csv else None)
        except OSError as e:
            raise CliError("cannot write log {}: {}".format(path, e.strerror or e)) from None
        self.writer: Optional[Any] = None
        if self.csv:
            self.writer = csv.DictWriter(self.f, fieldnames=list(COLUMNS), lineterminator="\n")
            if fresh:
                self.writer.writeheader()

    def write(self, row: Dict[str, Any]) -> None:
        clean = {k: v for k, v in row.items() if v is not None}
        if self.writer is not None:
            self.writer.writerow({k: clean.get(k, "") for k in COLUMNS})
        else:
            self.f.write(json.dumps(clean) + "\n")
        self.f.flush()

    def close(self) -> None:
        self.f.close()
