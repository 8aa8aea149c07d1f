"""The bottom layer: errors, value types, metrics, keys and roles, the failed-login throttle, audit vocabulary,
secrets from files, redaction, text rules, time, files and background loops. Imports nothing of the app."""
