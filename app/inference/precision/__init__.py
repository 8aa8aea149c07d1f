"""What the model computes in (CAMPUSGUARD_PRECISION), how a reduced precision is built from
the configured weights, and the gate that decides whether it may be served."""
