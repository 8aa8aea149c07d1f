"""The HTTP layer: one router per resource (``routes/``, mounted by ``routes/__init__.py``) and what they
share (typed dependencies, errors, schemas, the key gate). Thin: parse the request, hand a frame to the
frame flow (app/flow) or ask one role of the rules port, shape the reply."""
