"""Camera ingest: one ffmpeg per camera under a watchdog, frames into the frame flow (embedded) or POSTed to a
replica (``campusguard gateway``); stream states reported to the service."""
