"""Layers import only downward (docs/architecture.md): a check that fails on a wrong-way import."""

from __future__ import annotations

import ast
from pathlib import Path

import streamer

ROOT = Path(streamer.__file__).parent

#: Rank of each top-level part of the package: a module may import its own
#: part and any part of a lower rank, nothing else.
LAYERS: dict[str, int] = {
    "errors": 0,
    "timing": 0,
    "interrupts": 0,
    "synth": 0,
    "storage": 1,
    "shard": 2,
    "index": 3,
    "formats": 4,
    "decode": 5,
    "dataset": 6,
    "pipeline": 7,
    "write": 7,
    "timing_report": 7,
    "demo": 8,
    "torch": 8,
    "jobs": 8,
    "cli": 9,
    "__init__": 9,
    "__main__": 10,
}


def _part(module: str) -> str:
    """``streamer.formats.mp3.parse`` -> ``formats``; ``streamer`` -> ``__init__``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _imports(path: Path, root: Path) -> list[tuple[str, int]]:
    """Absolute names of the streamer modules ``path`` imports, with line numbers."""
    module = ".".join(path.relative_to(root.parent).with_suffix("").parts)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    if path.name == "__init__.py":
        module = package
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.append((target, node.lineno))
    return [(name, line) for name, line in found if name.split(".")[0] == "streamer"]


def _violations(root: Path = ROOT) -> list[str]:
    wrong = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        importer = _part("streamer." + ".".join(rel.with_suffix("").parts))
        if rel.name == "__init__.py" and len(rel.parts) == 1:
            importer = "__init__"
        for target, line in _imports(path, root):
            imported = _part(target)
            if imported == importer:
                continue
            if LAYERS[imported] >= LAYERS[importer]:
                wrong.append(f"{rel}:{line} ({importer}) imports {target} ({imported})")
            private = [p for p in target.split(".")[2:] if p.startswith("_")]
            if private:
                wrong.append(f"{rel}:{line} imports the private module {target}")
    return wrong


def test_every_part_has_a_layer() -> None:
    parts = {p.stem if p.is_file() else p.name for p in ROOT.iterdir() if p.name != "__pycache__"}
    assert parts - {"py"} <= set(LAYERS) | {"__main__"}, parts - set(LAYERS)


def test_layers_import_only_downward() -> None:
    assert _violations() == []


def test_the_check_catches_a_wrong_way_import(tmp_path: Path) -> None:
    """The check itself can fail: an upward import planted in a copy is reported."""
    import shutil

    copy = tmp_path / "streamer"
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "storage" / "planted.py").write_text("from ..pipeline import Streamer\n")
    (copy / "decode" / "planted.py").write_text("from ..storage._bounds import check_range\n")
    found = _violations(copy)
    assert any("storage/planted.py:1 (storage) imports streamer.pipeline" in v for v in found)
    assert any("private module streamer.storage._bounds" in v for v in found)
