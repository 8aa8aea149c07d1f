"""A large site shared by the dry-run unit and isolation tests."""

from __future__ import annotations


def big_site(cameras: int) -> str:
    """A valid site file of ``cameras`` cameras (6,000 are about 1.1 MB and 6 s of CPU to parse)."""
    cam = ("  - id: cam-{i:05d}\n    zones:\n      - name: z\n        polygon: [[0.1, 0.1], [0.9, 0.1], [0.9, 0.9], [0.1, 0.9]]\n"
           "        rules:\n          - {{type: intrusion, classes: [person], cooldown_s: 5}}\n")
    return "cameras:\n" + "".join(cam.format(i=i) for i in range(cameras))
