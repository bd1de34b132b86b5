"""deploy/Dockerfile: the image runs the console script as a non-root user
and is built from the package files alone. Built and run only where a Docker
daemon answers; the static checks run everywhere."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
UID = "10001"


def instructions() -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` of the Dockerfile, continuation lines joined."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    lines = [line.strip() for line in text.splitlines()]
    return [
        (word.upper(), rest.strip())
        for word, _, rest in (line.partition(" ") for line in lines)
        if word and not word.startswith("#")
    ]


def test_the_entrypoint_is_the_console_script() -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    (entrypoint,) = [args for word, args in instructions() if word == "ENTRYPOINT"]
    assert entrypoint == '["streamer"]' and "streamer" in scripts


def test_it_runs_as_the_non_root_user_it_creates() -> None:
    steps = instructions()
    runs = " ".join(args for word, args in steps if word == "RUN")
    assert re.search(rf"useradd --uid {UID} ", runs)
    (user,) = [args for word, args in steps if word == "USER"]
    assert user.split(":")[0] == UID
    assert [word for word, _ in steps].index("USER") > max(
        i for i, (word, _) in enumerate(steps) if word == "RUN"
    )  # nothing runs as root after it


def test_the_build_context_is_the_package_files() -> None:
    copied = {
        Path(source).name
        for word, args in instructions()
        if word == "COPY"
        for source in args.split()[:-1]
    }
    allowed = {
        line.removeprefix("!").rstrip("/")
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.startswith("!")
    }
    assert copied == allowed == {"pyproject.toml", "README.md", "LICENSE", "streamer"}


def _docker_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    done = subprocess.run(["docker", "info"], capture_output=True, check=False, timeout=30)
    return done.returncode == 0


def test_the_image_builds_and_runs_as_that_user() -> None:
    if not _docker_answers():
        pytest.skip("no Docker daemon answers here: the Dockerfile is checked statically only")
    tag = f"streamer-test:{uuid.uuid4().hex[:8]}"
    build = ["docker", "build", "-f", str(DOCKERFILE), "-t", tag, str(ROOT)]
    subprocess.run(build, check=True, capture_output=True, timeout=1800)
    try:
        run = ["docker", "run", "--rm", tag, "--version"]
        assert subprocess.run(run, check=True, capture_output=True, text=True).stdout.startswith(
            "streamer "
        )
        whoami = ["docker", "run", "--rm", "--entrypoint", "id", tag, "-u"]
        assert (
            subprocess.run(whoami, check=True, capture_output=True, text=True).stdout.strip() == UID
        )
    finally:
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True, check=False)
