"""`python -m tests.support.serve_with_faults serve`: the real CLI with every registered
backend wrapped in a FaultInjectingDetector configured by CAMPUSGUARD_TEST_* variables.

The backend registry is the service's one seam for runtimes, so it is also the one place
where test faults enter; nothing on the production path mentions them.
"""

from __future__ import annotations

import logging
import os
import sys

from app.inference.backends.registry import BACKENDS
from app.cli import main
from tests.support.faults import FaultInjectingDetector, Faults

log = logging.getLogger("campusguard.tests")


def install(faults: Faults) -> None:
    for name, factory in list(BACKENDS.items()):
        def wrapped(settings, _factory=factory):
            log.warning("test fault injection: %s", faults)
            # the engine warms up with settings.warmup_iters calls; faults fire after them
            return FaultInjectingDetector(_factory(settings), faults, skip=settings.warmup_iters)

        BACKENDS[name] = wrapped


if __name__ == "__main__":
    install(Faults.from_env(os.environ))
    sys.exit(main(sys.argv[1:]))
