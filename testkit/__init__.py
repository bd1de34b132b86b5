"""Test and benchmark support shared by ``tests/`` and ``benchmarks/``; not part of the wheel.

``testkit.servers``: real servers on loopback (a fault-injecting aiohttp server,
moto upload helper). Importable from the repository root: pytest puts the root
on ``sys.path`` (``pythonpath`` in pyproject.toml), and ``python -m benchmarks...``
run from the root finds it as it finds ``benchmarks``.
"""
