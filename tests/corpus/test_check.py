"""The corpus crop check itself (``testkit.corpus``): the crops it asks for."""

from __future__ import annotations

import random

import pytest

from testkit.corpus import crop_points


@pytest.mark.parametrize("length", [1, 2, 3, 441, 44100 * 3])
def test_every_crop_holds_a_sample(length: int) -> None:
    """A crop of under half a sample "decodes to nothing" (CropError, by
    design); the check asked for such crops of an episode under one sample
    long (Freedink's intro.wav holds one) and counted the error as a failure."""
    rate = 44100
    for start, end in crop_points(None, length, rate, 50, random.Random(3)):
        assert round(end * rate) > round(start * rate), (start, end)
        assert round(start * rate) >= 0 and round(end * rate) <= length
