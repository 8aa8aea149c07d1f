"""HTTP routers. Thin: parse the request, call the engine, shape the reply."""
