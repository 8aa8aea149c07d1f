"""`python -m tests.support.serve_with_faults serve`: the real CLI with every registered
backend wrapped in a FaultInjectingDetector that reads its fault from the control file
named by CAMPUSGUARD_TEST_FAULTS_FILE (tests/support/faults.py).

The backend registry is the service's one seam for runtimes, so it is also the one place
where test faults enter; nothing on the production path mentions them.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from app.cli import main
from app.inference.backends.registry import BACKENDS
from tests.support.faults import CONTROL_VARIABLE, FaultInjectingDetector

log = logging.getLogger("campusguard.tests")


def install(control: Path) -> None:
    for name, factory in list(BACKENDS.items()):
        def wrapped(options, _factory=factory):
            log.warning("test fault injection: faults switched through %s", control)
            return FaultInjectingDetector(_factory(options), control)

        BACKENDS[name] = wrapped


if __name__ == "__main__":
    install(Path(os.environ[CONTROL_VARIABLE]))
    sys.exit(main(sys.argv[1:]))
