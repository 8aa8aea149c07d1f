"""The rules service: the façade the frame flow and the routes talk to, and its parts (frames, health,
site reloads, events fan-out, fleet state, shards, view checks, replay and dry runs)."""
