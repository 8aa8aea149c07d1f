"""`campusguard demo` and the first run's starter site file (docs/cameras.md, README quick start)."""
