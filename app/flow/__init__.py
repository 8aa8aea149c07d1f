"""flow: the per-frame use case, once, for every way a frame arrives.

A frame goes capture-time check -> engine -> shadow offer -> the camera's rules (on the
engine's executor) -> per-camera detection metrics, whether it came to ``POST /detect``,
``/detect/batch``, the DeepStack route or the embedded ingest (app/flow/frame.py). Those
callers read, parse and answer; none of them repeats a step. A frame from another process,
or for another model, is one more caller of the same object.

The layer sits below ``app.api`` and ``app.ingest`` and above ``app.rules`` and
``app.inference``; of the rules it knows ``app.rules.port`` only, so a server without a site
file never loads the rules stack.
"""
