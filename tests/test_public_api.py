"""The public surface stays honest: every ``__all__`` names what its module has, and
``streamer`` exports the public API.

Modules are found by walking the package, not listed, so this keeps working
when modules move between packages.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

import streamer

#: What ``import streamer`` promises (``from streamer import *``).
PUBLIC = [
    "BlobHandle",
    "CacheConfig",
    "CompressedShardWarning",
    "Crop",
    "CropError",
    "CropRequest",
    "DataError",
    "Dataset",
    "LayoutError",
    "Mix",
    "PackError",
    "RandomCrops",
    "RetryPolicy",
    "Sampler",
    "SegmentCrops",
    "SequentialCrops",
    "ShardError",
    "StorageError",
    "Streamer",
    "StreamerError",
    "StreamerStats",
    "WorkerDied",
    "WorkerError",
    "open_dataset",
    "pack",
]

#: Third-party packages of optional extras (pyproject.toml): a module that
#: needs one that is not installed (``streamer.torch`` without torch) is left out.
OPTIONAL = {"torch", "torchcodec", "modal", "matplotlib"}


def every_module() -> tuple[list[ModuleType], list[str]]:
    """Every module under ``streamer``, imported; and the import failures.

    ``__main__`` modules are scripts (``python -m streamer.cli`` runs the
    command on import) and are not imported; modules with an ``if __name__ ==
    "__main__"`` block (``streamer.pipeline.worker``) only get imported.
    """
    failures: list[str] = []
    modules = [streamer]
    walk = pkgutil.walk_packages(
        streamer.__path__, f"{streamer.__name__}.", onerror=failures.append
    )
    for info in walk:
        if info.name.rpartition(".")[2] == "__main__":
            continue
        try:
            modules.append(importlib.import_module(info.name))
        except ModuleNotFoundError as error:
            if (error.name or "").partition(".")[0] not in OPTIONAL:
                failures.append(f"{info.name}: {error!r}")
        except Exception as error:
            failures.append(f"{info.name}: {error!r}")
    return modules, failures


def test_every_module_imports_and_its___all___names_what_it_has() -> None:
    modules, failures = every_module()
    assert not failures, failures
    assert len(modules) > 10  # the walk found the subpackages' modules
    missing = [
        f"{module.__name__}.{name}"
        for module in modules
        for name in getattr(module, "__all__", ())
        if not hasattr(module, name)
    ]
    assert not missing, missing


def test_streamer_exports_the_public_api() -> None:
    missing = sorted(set(PUBLIC) - set(streamer.__all__))
    assert not missing, f"not in streamer.__all__: {missing}"
    for name in PUBLIC:
        assert hasattr(streamer, name), name


def test_the_public_names_are_loaded_on_first_use() -> None:
    """``import streamer`` loads none of its heavy modules (the command's
    first line, ``import streamer.errors``); each public name says where it
    lives, and that is where it comes from."""
    import subprocess
    import sys

    assert sorted(streamer._HOMES) == sorted(streamer.__all__)
    for name, home in streamer._HOMES.items():
        assert getattr(streamer, name) is getattr(importlib.import_module(home, "streamer"), name)
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, streamer; print(' '.join(sys.modules))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert not {"av", "pyarrow", "numpy", "aiohttp", "botocore"} & set(loaded)
