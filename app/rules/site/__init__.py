"""The operator's site file: its schema, loading and validation, and zone edits written back with comments kept."""
