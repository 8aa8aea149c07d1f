"""Evidence of events: snapshot and clip files, their paths and URLs, the recent frames kept for clips and
the newest frame per camera for the console."""
