"""Frames to detections: the engine (queue, micro-batches, lanes, admission, watchdog), the pipeline, the
runtimes (backends/), pixels (vision/), precision and its gate (precision/), the shadow reference (shadow/)."""
