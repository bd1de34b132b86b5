"""Opus facts that every container's index uses.

How long a decode that starts cold (at a seek point) must run before a crop
depends on the modes of the stream's packets, which each packet's TOC byte
names (RFC 6716 3.1: configurations 0-11 SILK, 12-15 hybrid, 16-31 CELT).
CELT converges within the formats' 0.5 s. SILK, on speech, does not always:
its long-term predictor carries an error through voiced speech, and FFmpeg's
decoder started cold inside some voiced passages was off by up to 1.86 for
0.5 s, then exact (docs/decoding.md "Opus pre-roll"). Measured on speech
(400 random 0.3 s crops of the corpus's speech, opusenc): narrowband SILK
needed up to 1.5 s, wideband SILK and hybrid up to 0.75 s.
"""

from __future__ import annotations

__all__ = ["DECODED_RATE", "NO_PACKET", "PREROLL_SECONDS", "mode_preroll", "toc_config"]

#: Pre-roll for CELT (the codec's own, in every container): max error 2e-8
#: against the full decode after 0.5 s.
PREROLL_SECONDS = 0.5
#: The rate every Opus stream decodes at, whatever rate it was encoded from.
DECODED_RATE = 48000
#: Pre-roll for a stream with wideband SILK or hybrid packets (configurations 8-15).
SILK_PREROLL_SECONDS = 1.0
#: Pre-roll for a stream with narrowband or mediumband SILK packets (configurations 0-7).
NARROWBAND_PREROLL_SECONDS = 2.0
#: The lowest configuration of a stream without packets (as if all CELT).
NO_PACKET = 32


def toc_config(toc: int) -> int:
    """A packet's configuration (its mode, bandwidth and frame size: RFC
    6716 3.1), from its TOC byte, the packet's first."""
    return toc >> 3


def mode_preroll(lowest_config: int) -> int:
    """Pre-roll in 48 kHz samples for a stream whose packets' lowest TOC
    configuration is ``lowest_config``; 0 for CELT only (the format's own
    pre-roll is enough)."""
    if lowest_config < 8:
        return round(NARROWBAND_PREROLL_SECONDS * DECODED_RATE)
    if lowest_config < 16:
        return round(SILK_PREROLL_SECONDS * DECODED_RATE)
    return 0
