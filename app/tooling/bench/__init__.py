"""Benchmarks: the measuring behind ``campusguard bench``, ``loadtest``, ``soak`` and ``parity``.

``args`` holds the argparse types, ``timing`` the timing loops and peak-memory sampler,
``runner`` runs the bench plan row by row, ``table`` turns rows into ratios, targets and
files, ``plots`` draws them, ``stats`` the arithmetic, ``report`` the writers, ``prom`` and
``http`` talk to a running server, ``loadtest`` / ``soak`` measure it and ``parity`` compares
detections. The command lines live in ``app.commands`` beside the other commands.
"""
