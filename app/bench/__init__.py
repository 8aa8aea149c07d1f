"""Benchmarks: ``campusguard bench`` (the migration table), ``loadtest`` and ``soak``.

``stats`` holds the arithmetic (percentiles, ratios), ``report`` writes JSON, CSV,
Markdown and PNG plots, ``prom`` reads the server's /metrics, and ``command``,
``loadtest`` and ``soak`` are the three CLI commands.
"""
