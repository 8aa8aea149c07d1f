"""The shadow lane: a sample of answered frames re-run on a reference backend, in the background.

After a release nothing else watches whether the served model (int8, fp16, another runtime
or driver) still finds what the fp32 reference finds on *this* site's frames. The lane takes
a small sample after the primary answered, runs the reference on the original bytes (its own
full decode and letterbox) only while the engine is idle, and scores the primary against it
with the very matching ``campusguard parity`` uses (app/inference/precision/agreement.py).

    book.py      rolling agreement per camera and overall (F1 of recall and precision), drift
    worst.py     the worst frames per camera (bounded), with both box sets
    lane.py      sampling, the bounded queue, the idle-priority worker; NoShadow when off
    collector.py the ``campusguard_shadow_*`` series, read from the book at scrape time
    draw.py      a kept frame with both box sets drawn (GET /shadow/worst/{id}.jpg)
"""
