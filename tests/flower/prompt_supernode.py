"""``flower-supernode``, pulling every 0.2 s where flwr 1.42's SuperNode sleeps 3 s after an empty pull
(and 0.5 s while its ClientApp works): the same SuperNode, run from flwr's venv by the tests
(tests/flower/test_flower.py ``supernode_cmd``), only sooner to see each message of a round."""
import sys
import time
import types

import flwr.supernode.start_client_internal as loop
from flwr.supernode.cli import flower_supernode

PULL_S = 0.2


def _sleep(seconds: float) -> None:
    time.sleep(min(seconds, PULL_S))


# the loop's module uses ``time`` for its sleeps only
loop.time = types.SimpleNamespace(**{k: getattr(time, k) for k in dir(time) if not k.startswith("_")})
loop.time.sleep = _sleep

if __name__ == "__main__":
    sys.argv[0] = "flower-supernode"
    sys.exit(flower_supernode())
