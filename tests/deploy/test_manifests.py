"""deploy/k8s/ and deploy/slurm/: the Indexed Jobs carry what Kubernetes needs
to run one partition per pod, and the commands they and the Slurm array run
parse with streamer's own CLI parser into partitions that are disjoint and
complete (a renamed flag breaks these tests)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from streamer.cli import build_parser
from streamer.write.index import parse_part, select_shards

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
JOBS = {"index-job.yaml": ("index", "shards"), "pack-job.yaml": ("pack", "files")}
#: The user deploy/Dockerfile creates and runs as.
IMAGE_UID = 10001


def load(name: str) -> dict:  # type: ignore[type-arg]
    return yaml.safe_load((DEPLOY / "k8s" / name).read_text())


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion of a container's args (defined variables only)."""
    return re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), text)


@pytest.mark.parametrize("name", sorted(JOBS))
def test_the_job_is_an_indexed_job_with_what_it_needs(name: str) -> None:
    job = load(name)
    assert job["apiVersion"] == "batch/v1" and job["kind"] == "Job"
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed"
    assert spec["completions"] == spec["parallelism"] >= 1
    assert spec["backoffLimitPerIndex"] >= 1 and spec["backoffLimit"] >= 1
    (rule,) = spec["podFailurePolicy"]["rules"]  # a usage error is not retried
    assert rule["action"] == "FailJob" and rule["onExitCodes"]["values"] == [2]
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never"  # required by podFailurePolicy
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == IMAGE_UID
    (container,) = pod["containers"]
    assert container["name"] == rule["onExitCodes"]["containerName"]
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert [e["secretRef"]["name"] for e in container["envFrom"]] == ["streamer-aws"]
    for kind in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(container["resources"][kind])
    env = {e["name"]: e for e in container["env"]}
    field = env["JOB_COMPLETION_INDEX"]["valueFrom"]["fieldRef"]["fieldPath"]
    assert field == "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    if container["securityContext"].get("readOnlyRootFilesystem"):
        assert "/tmp" in [m["mountPath"] for m in container["volumeMounts"]]
    assert not [e for e in env.values() if "AWS" in e["name"]]  # credentials: the Secret only


@pytest.mark.parametrize("name", sorted(JOBS))
def test_every_pod_runs_a_valid_command_on_its_own_partition(name: str) -> None:
    command, option = JOBS[name]
    job = load(name)
    (container,) = job["spec"]["template"]["spec"]["containers"]
    values = {e["name"]: e.get("value", "") for e in container["env"]}
    count = job["spec"]["completions"]
    specs = []
    for index in range(count):
        env = {**values, "JOB_COMPLETION_INDEX": str(index)}
        args = build_parser().parse_args([expand(a, env) for a in container["args"]])
        assert args.command == command
        assert "$(" not in str(vars(args))  # every variable was defined
        specs.append(getattr(args, option))
        assert parse_part(specs[-1]) == (index, count)
    names = [f"shard-{n:06d}" for n in range(3 * count + 1)]
    picked = [name for spec in specs for name in select_shards(names, spec)]
    assert sorted(picked) == names  # disjoint and complete


@pytest.fixture
def parsed_commands(tmp_path: Path) -> Path:
    """A folder whose ``streamer`` runs streamer's own argument parser on its
    arguments (no work) and prints what it parsed: what the Slurm script would run."""
    program = tmp_path / "streamer"
    program.write_text(
        f"#!{sys.executable}\n"
        "import sys\n"
        "from streamer.cli import build_parser\n"
        "a = build_parser().parse_args(sys.argv[1:])\n"
        "print(a.command, getattr(a, 'shards', None) or a.files, vars(a).get('workers'))\n"
    )
    program.chmod(0o755)
    return tmp_path


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["index", "s3://b/ds"], "index {}/4 2"),
        (["pack", "s3://b/raw", "s3://b/ds"], "pack {}/4 None"),
    ],
)
def test_the_slurm_array_runs_its_partition(parsed_commands: Path, argv, expected) -> None:  # type: ignore[no-untyped-def]
    script = DEPLOY / "slurm" / "streamer-array.sbatch"
    for task in range(4):
        env = {
            **os.environ,
            "PATH": f"{parsed_commands}{os.pathsep}{os.environ['PATH']}",
            "SLURM_ARRAY_TASK_ID": str(task),
            "SLURM_CPUS_PER_TASK": "2",
            "PARTS": "4",
        }
        done = subprocess.run(
            ["bash", str(script), *argv], env=env, capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == expected.format(task).split()


def sbatch(commands: Path, *argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    """The Slurm script run with ``argv``, ``env`` added, ``streamer`` parsing only."""
    script = DEPLOY / "slurm" / "streamer-array.sbatch"
    path = f"{commands}{os.pathsep}{os.environ['PATH']}"
    full = {**os.environ, "PATH": path, **env}
    return subprocess.run(
        ["bash", str(script), *argv], env=full, capture_output=True, text=True, check=False
    )


def test_the_slurm_array_refuses_what_cannot_mean_anything(parsed_commands: Path) -> None:
    """Exit code 2, one line, as ``streamer``'s usage errors (bash's
    ``${VAR:?}`` exited 1: a failure a retry policy retries)."""
    task = {"SLURM_ARRAY_TASK_ID": "0", "PARTS": "2"}
    refused = {
        "PARTS": sbatch(parsed_commands, "index", "s3://b/ds", SLURM_ARRAY_TASK_ID="0"),
        "(not 'x')": sbatch(parsed_commands, "index", "s3://b/ds", **{**task, "PARTS": "x"}),
        "job array": sbatch(parsed_commands, "index", "s3://b/ds", PARTS="2"),
        "unknown job 'verify'": sbatch(parsed_commands, "verify", "s3://b/ds", **task),
        "unknown job ''": sbatch(parsed_commands, **task),
        "index URL | pack SRC OUT": sbatch(parsed_commands, "pack", "s3://b/raw", **task),
        "task 5 of an array for PARTS=2": sbatch(
            parsed_commands, "index", "s3://b/ds", **{**task, "SLURM_ARRAY_TASK_ID": "5"}
        ),
    }
    for said, done in refused.items():
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1 and said in lines[0], (said, done.stderr)


@pytest.mark.parametrize(
    ("array", "parts", "refused"),
    [
        (
            {
                "SLURM_ARRAY_TASK_COUNT": "8",
                "SLURM_ARRAY_TASK_MIN": "0",
                "SLURM_ARRAY_TASK_MAX": "7",
            },
            "16",
            True,
        ),
        (
            {
                "SLURM_ARRAY_TASK_COUNT": "16",
                "SLURM_ARRAY_TASK_MIN": "0",
                "SLURM_ARRAY_TASK_MAX": "15",
            },
            "8",
            True,
        ),
        (
            {
                "SLURM_ARRAY_TASK_COUNT": "8",
                "SLURM_ARRAY_TASK_MIN": "0",
                "SLURM_ARRAY_TASK_MAX": "7",
            },
            "8",
            False,
        ),
        # A stepped array, half the partitions: refused.
        (
            {
                "SLURM_ARRAY_TASK_COUNT": "4",
                "SLURM_ARRAY_TASK_MIN": "0",
                "SLURM_ARRAY_TASK_MAX": "6",
            },
            "8",
            True,
        ),
        # Re-submitting only the failed tasks of a 16-part job: said with RERUN=1.
        (
            {
                "SLURM_ARRAY_TASK_COUNT": "2",
                "SLURM_ARRAY_TASK_MIN": "3",
                "SLURM_ARRAY_TASK_MAX": "7",
            },
            "16",
            True,
        ),
        (
            {
                "SLURM_ARRAY_TASK_COUNT": "2",
                "SLURM_ARRAY_TASK_MIN": "3",
                "SLURM_ARRAY_TASK_MAX": "7",
                "RERUN": "1",
            },
            "16",
            False,
        ),
        # Tasks 0-3 failed: their re-run looks like a first array of the wrong size.
        (
            {
                "SLURM_ARRAY_TASK_COUNT": "4",
                "SLURM_ARRAY_TASK_MIN": "0",
                "SLURM_ARRAY_TASK_MAX": "3",
                "RERUN": "1",
            },
            "16",
            False,
        ),
    ],
)
def test_the_slurm_array_refuses_an_array_of_another_size(
    parsed_commands: Path, array, parts, refused
) -> None:  # type: ignore[no-untyped-def]
    """``--array=0-7`` with PARTS=16 ran partitions 0..7 of 16, each task
    succeeding, the array green and half the shards never touched: the
    array must be every partition, 0..PARTS-1, unless ``RERUN=1`` says it
    runs some again (the failed tasks 0-3 were refused as an array of the
    wrong size, a stepped array let through)."""
    done = sbatch(
        parsed_commands, "index", "s3://b/ds", SLURM_ARRAY_TASK_ID="3", PARTS=parts, **array
    )
    if refused:
        assert done.returncode == 2 and "PARTS" in done.stderr and "--array" in done.stderr, (
            done.stderr
        )
    else:
        assert done.returncode == 0, done.stderr
