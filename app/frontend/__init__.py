"""Front-end processes: several HTTP processes on one socket feeding one owner (issue 40, item 2).

With ``CAMPUSGUARD_FRONTENDS`` = N > 1 the parent binds the public socket once and N front-end
processes serve it (``proxy``): each parses HTTP, reads request bodies from slow clients and
writes the replies, and hands every request to the one **owner** process over a Unix socket
(``wire``: a JSON header and raw bytes, length-prefixed). The owner (``bridge``) runs the
service's own ASGI app on it, so auth, the failed-key throttle, admission, the engine, the
rules, the store and the metrics stay in one process and are never split; it serializes the
frames of one camera in the order it receives them (``sequencer``). A ``POST /detect`` whose
JSON reply is wanted takes the compact path (``compact``): the front end checks the key and
the query, reads and parses the body and writes the reply, and the owner answers a small head
and the image's bytes without the ASGI app (app/wiring/compact.py).
"""
