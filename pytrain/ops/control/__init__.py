"""Control flow: If, Loop and Scan, whose bodies are subgraphs that may read the enclosing graph's
values (outer scope). The executor plans each body once (:mod:`.subgraph`) and passes the outer values
it reads as extra inputs of the node, so a plan stays straight-line at every level."""
from __future__ import annotations
