"""``python -m streamer``: the ``streamer`` command (``streamer.cli``)."""

from .cli import main

raise SystemExit(main())
