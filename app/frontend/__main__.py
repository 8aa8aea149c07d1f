"""``python -m app.frontend OPTIONS_JSON``: one front-end process (app/frontend/process.py)."""

import sys

from app.frontend.process import main

sys.exit(main())
