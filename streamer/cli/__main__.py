"""``python -m streamer.cli``: the same as the ``streamer`` command."""

import sys

from . import main

sys.exit(main())
