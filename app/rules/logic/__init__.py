"""Pure per-camera rule logic: rule state machines, geometry, schedules, tracking, capture time, counts and
camera view checks. No store, socket or file."""
