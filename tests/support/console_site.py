"""Zone and object fixtures shared by the console site tests."""

from __future__ import annotations

ZONE = "/admin/site/cameras/{}/zones/{}"


BIKES = {"name": "bike-rack", "kind": "restricted", "polygon": [[0.3, 0.6], [0.7, 0.6], [0.7, 0.95], [0.3, 0.95]],
         "rules": [{"type": "intrusion", "classes": ["person"], "min_confidence": 0.3}]}
