"""The docs say what the code does: users copy their scripts from them.

Every ``streamer COMMAND ...`` line of README.md, docs/ and deploy/ (fenced
blocks, comments of the deploy files, and code spans that are whole
commands) names a command the CLI has, with options that command takes,
as the CLI's own parser (``streamer.cli.build_parser``) knows them; an
option span right after a command's name (```streamer pack`'s
`--shard-size```) must be that command's too. Every ``python`` block runs,
in order, one namespace per page, on a small dataset that holds the keys the
docs name, served where the docs say (``s3://bucket/podcasts`` from a moto
server on loopback, ``/data/podcasts`` from a local copy, ...). A block
that cannot run here (a torch DDP launch, a fragment) carries
``<!-- not run: REASON -->`` on the line before it: it is compiled and the
names it takes from ``streamer`` are checked. Every ``streamer.NAME`` code
span names something the package has.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import dataclasses
import difflib
import importlib
import importlib.util
import inspect
import re
import shutil
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import SECRET

import streamer
from streamer.cli import COMMANDS, build_parser
from streamer.dataset.planned import PLANNED_KEY
from streamer.index.table import REVISION_KEY
from streamer.write.pack import PLAN_KEY
from testkit.servers import LoopbackServer, file_handler, upload_tree

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "deploy" / "README.md"]
#: Deploy files whose comments quote commands (their own command lines are
#: parsed by tests/deploy/test_manifests.py).
DEPLOY_FILES = [
    *sorted((ROOT / "deploy" / "k8s").glob("*.yaml")),
    ROOT / "deploy" / "slurm" / "streamer-array.sbatch",
    ROOT / "deploy" / "Dockerfile",
]
#: Spans that read as ``streamer.NAME`` but are keys of a shard's schema metadata.
METADATA_KEYS = {PLAN_KEY, PLANNED_KEY, REVISION_KEY.decode()}
NOT_RUN = re.compile(r"<!--\s*not run:\s*(.+?)\s*-->")
FENCE = re.compile(r"^(\s*)```(\w*)\s*$")
SHELL = {"", "sh", "bash", "console", "shell"}


@dataclasses.dataclass
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    lang: str
    text: str
    not_run: str | None  # the reason given in the comment before it

    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of a markdown page (indented ones in lists too)."""
    lines = page.read_text().splitlines()
    found, number = [], 0
    while number < len(lines):
        opening = FENCE.match(lines[number])
        if opening is None:
            number += 1
            continue
        end = next(i for i in range(number + 1, len(lines)) if lines[i].strip() == "```")
        before = lines[number - 1] if number else ""
        note = NOT_RUN.search(before)
        body = textwrap.dedent("\n".join(lines[number + 1 : end]))
        found.append(Block(page, number + 1, opening[2], body, note[1] if note else None))
        number = end + 1
    return found


def prose(page: Path) -> str:
    """The page without its fenced blocks (their lines blanked)."""
    lines, inside = [], False
    for line in page.read_text().splitlines():
        if FENCE.match(line) or line.strip() == "```":
            inside = not inside
            lines.append("")
        else:
            lines.append("" if inside else line)
    return "\n".join(lines)


def spans(text: str) -> list[str]:
    """Inline code spans, their line breaks made spaces."""
    return [" ".join(s.split()) for s in re.findall(r"`([^`\n]+(?:\n[^`\n]+)*)`", text)]


# -- command lines -------------------------------------------------------------


def shell_commands(text: str) -> Iterator[str]:
    """Each ``streamer ...`` command of shell text: continuation lines joined
    (after a ``\\``, or indented options of a synopsis),
    cut at a comment, ``;``, ``&&``, `` & `` and a pipe outside ``[...]``
    (a synopsis's ``[--shards i/n | --files i/n]`` is one command). The
    lines the command writes (``streamer crop: error: ...``) are no commands."""
    for line in re.sub(r"\\\n|\n(?=\s+[\[-])", " ", text).splitlines():
        line = re.split(r"(?:^|\s)#", line)[0]
        for start in re.finditer(r"(?<![\w./-])streamer(?=\s+[-\[A-Za-z])", line):
            command = _cut(line[start.start() :])
            if not re.match(
                r"streamer\s+[\w-]+:", command
            ):  # a message: `streamer crop: error: ...`
                yield command


def _cut(command: str) -> str:
    depth = 0
    for i, char in enumerate(command):
        depth += {"[": 1, "]": -1, "(": 1, ")": -1}.get(char, 0)
        if depth < 0 or (
            depth == 0 and (char in ";`" or command.startswith((" & ", " && ", " | "), i))
        ):
            return command[:i]
    return command


def commands(path: Path) -> list[tuple[str, str]]:
    """(where, command) for every streamer command line ``path`` quotes."""
    name = path.relative_to(ROOT)
    if path.suffix != ".md":  # a deploy file: its comments' code spans and example lines
        lines = path.read_text().splitlines()
        notes = "\n".join(line.split("#", 1)[1].strip() for line in lines if "#" in line)
        found = [
            c for span in spans(notes) if span.startswith("streamer ") for c in shell_commands(span)
        ]
        examples = notes.replace("\\\n", " ").splitlines()
        found += [
            c
            for line in examples
            if line.startswith(("streamer ", "docker run "))
            for c in shell_commands(line)
        ]
        if path.suffix == ".sbatch":  # a shell script: its own commands too
            found += shell_commands("\n".join(line for line in lines if not line.startswith("#")))
        return [(str(name), command) for command in found]
    found = [
        (block.where(), command)
        for block in blocks(path)
        if block.lang in SHELL
        for command in shell_commands(block.text)
    ]
    for span in spans(prose(path)):
        if span.startswith("streamer ") or " streamer " in span:  # docker run ... streamer index
            found += [(str(name), c) for c in shell_commands(span) if meant_as_command(c)]
    return found


def meant_as_command(span: str) -> bool:
    """Whether a code span that starts with ``streamer`` is a command, not a
    quoted message (`streamer serves the first audio stream ...`): its next
    word is an option, a placeholder, or a command's name, or close to one
    (a misspelt command is a command, and wrong)."""
    word = span.split()[1]
    names = [*COMMANDS, "help"]
    return (
        word.startswith("-")
        or is_placeholder(word)
        or any(difflib.get_close_matches(part, names, cutoff=0.75) for part in word.split("/"))
    )


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return {
        name: sub
        for action in parser._actions
        if isinstance(action, argparse._SubParsersAction)
        for name, sub in action.choices.items()
    }


def options(parser: argparse.ArgumentParser) -> set[str]:
    return {option for action in parser._actions for option in action.option_strings}


def known(option: str, parser: argparse.ArgumentParser) -> bool:
    """Whether ``parser`` takes ``option`` (``-vv`` is ``-v`` twice)."""
    repeated = re.fullmatch(r"-([A-Za-z])\1+", option)
    return option in options(parser) or (bool(repeated) and f"-{option[1]}" in options(parser))


def is_placeholder(word: str) -> bool:
    return word.strip("[]").isupper() or word in ("...", "…")


def problems_of(command: str) -> list[str]:
    """What the CLI's parser does not know of ``command``: its command
    (``crop/bench`` is two), or an option (``--name`` or ``--name=value``,
    ``-o``) that the command does not take. Values are not checked: the docs
    write placeholders (``URL``, ``s3://bucket/ds``, ``SR``)."""
    words = command.split()[1:]
    parser, found = build_parser(), []
    targets = [parser]
    while words and words[0].startswith("-"):  # streamer -v COMMAND
        if not known(words[0], parser):
            found.append(f"streamer has no option {words[0]}")
        words = words[1:]
    if words and not is_placeholder(words[0]):
        names, words = words[0].split("/"), words[1:]
        unknown = [name for name in names if name not in subparsers(parser)]
        if unknown:
            return [f"no command {'/'.join(unknown)!r}"]
        targets = [subparsers(parser)[name] for name in names]
        while words and len(targets) == 1 and subparsers(targets[0]):  # timing report
            if words[0] not in subparsers(targets[0]):
                return [f"{command.split()[1]} has no subcommand {words[0]!r}"]
            targets, words = [subparsers(targets[0])[words.pop(0)]], words[1:]
    elif words:  # streamer COMMAND --help: an option of every command
        targets = list(subparsers(parser).values())
        words = words[1:]
    for word in words:
        option = word.strip("[](),.").split("=")[0]
        if re.fullmatch(r"--?[A-Za-z][\w-]*", option):
            found += [f"{t.prog} has no option {option}" for t in targets if not known(option, t)]
    return found


def option_after_command(text: str) -> Iterator[tuple[str, str]]:
    """(command, option) where prose puts an option's span right after a
    command's: ```streamer pack`'s `--shard-size```, ```index` (without
    `--force```, ```pack` unless `--no-index```, ```warmup`, `--give-up-after```."""
    between = r"(?:'s)?\s*[(,]?\s*(?:(?:and|or|with|without|no|unless)\s+)?"
    pattern = rf"`(?:streamer )?([a-z]+)`{between}`(--[a-z][\w-]*)[ =`]"
    for match in re.finditer(pattern, text):
        if match[1] in COMMANDS:
            yield match[1], match[2]


SOURCES = [*PAGES, *DEPLOY_FILES]


MODAL_APP = ROOT / "deploy" / "modal_app.py"


def modal_options() -> set[str]:
    """The options ``modal run deploy/modal_app.py`` takes: the parameters of
    its local entrypoint (read from the source: modal need not be installed)."""
    tree = ast.parse(MODAL_APP.read_text())
    (entry,) = [
        node
        for node in tree.body
        if isinstance(node, ast.FunctionDef)
        and any("local_entrypoint" in ast.unparse(d) for d in node.decorator_list)
    ]
    return {"--" + a.arg.replace("_", "-") for a in entry.args.args + entry.args.kwonlyargs}


def test_modal_commands_are_the_apps() -> None:
    runs = [
        line.split("#")[0]
        for block in blocks(ROOT / "deploy" / "README.md")
        for line in block.text.splitlines()
        if line.startswith("modal run deploy/modal_app.py")
    ]
    assert len(runs) >= 4
    used = {w.strip("[]") for line in runs for w in line.split() if w.startswith(("--", "[--"))}
    assert used - modal_options() == set()


def test_every_page_quotes_commands() -> None:
    """The extraction finds the commands (a change to it that finds none fails)."""
    assert len([c for path in SOURCES for c in commands(path)]) > 60


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_commands_are_the_clis(path: Path) -> None:
    wrong = [
        f"{where}: {command!r}: {p}"
        for where, command in commands(path)
        for p in problems_of(command)
    ]
    if path.suffix == ".md":
        text = prose(path)
        wrong += [
            f"{path.relative_to(ROOT)}: `{name}` then `{option}`: {name} has no option {option}"
            for name, option in option_after_command(text)
            if option not in options(subparsers(build_parser())[name])
        ]
    assert not wrong, "\n".join(wrong)


def test_the_command_check_catches_drift() -> None:
    """A made-up option, command or subcommand is found, a real one is not."""
    assert problems_of("streamer crop URL KEY 1 2 -o x.wav --sample-rate 16000") == []
    assert problems_of("streamer index URL [--shards i/n | --frobnicate]") == [
        "streamer index has no option --frobnicate"
    ]
    assert problems_of("streamer crop/bench --resample-quality HQ") == []
    assert problems_of("streamer crop/bench --json") == ["streamer crop has no option --json"]
    assert problems_of("streamer crops URL") == ["no command 'crops'"]
    assert problems_of("streamer timing merge a b") == ["timing has no subcommand 'merge'"]
    assert problems_of("streamer COMMAND --help") == []
    assert list(shell_commands("for i in 0 1; do streamer verify s3://b/ds --x & done")) == [
        "streamer verify s3://b/ds --x"
    ]
    prose = "`streamer pack`'s `--shard-size`, `index` (without `--force`) and `crop`, `-o`"
    assert list(option_after_command(prose)) == [("pack", "--shard-size"), ("index", "--force")]


# -- names ----------------------------------------------------------------------


def resolve(dotted: str) -> bool:
    """Whether ``streamer.a.b`` exists: an attribute, or a module. A module
    whose dependency is not installed here (``streamer.torch`` without torch)
    is looked up in its source instead: its top-level names."""
    parts = dotted.split(".")
    thing: Any = importlib.import_module(parts[0])
    for i, part in enumerate(parts[1:], start=1):
        if hasattr(thing, part):
            thing = getattr(thing, part)
            continue
        name = ".".join(parts[: i + 1])
        if importlib.util.find_spec(".".join(parts[:i])) is None or not _is_module(name):
            return False
        try:
            thing = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if (exc.name or "").startswith("streamer"):
                raise
            rest = parts[i + 1 :]
            return not rest or rest[0] in top_level_names(name)
    return True


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def top_level_names(module: str) -> set[str]:
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None
    tree = ast.parse(Path(spec.origin).read_text())
    names = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def code_names(source: str) -> set[str]:
    """The ``streamer`` names a Python snippet uses: its imports from the
    package and its ``streamer.a.b`` attribute chains."""
    tree = compile(source, "<docs>", "exec", ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    names = set()

    class Names(ast.NodeVisitor):
        def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
            if (node.module or "").split(".")[0] == "streamer":
                names.update(f"{node.module}.{alias.name}" for alias in node.names)

        def visit_Import(self, node: ast.Import) -> None:
            names.update(a.name for a in node.names if a.name.split(".")[0] == "streamer")

        def visit_Attribute(self, node: ast.Attribute) -> None:  # the whole chain, once
            chain, base = [node.attr], node.value
            while isinstance(base, ast.Attribute):
                chain.insert(0, base.attr)
                base = base.value
            if isinstance(base, ast.Name) and base.id == "streamer":
                names.add(".".join(["streamer", *chain]))
            else:
                self.visit(base)

    Names().visit(tree)
    return names


def span_names(text: str) -> set[str]:
    """``streamer.NAME`` chains in code spans (not files: ``streamer.py``)."""
    found = set()
    for span in spans(text):
        for match in re.finditer(r"(?<![\w/.-])streamer(?:\.[A-Za-z_]\w*)+", span):
            if not match[0].endswith(".py") and match[0] not in METADATA_KEYS:
                found.add(match[0])
    return found


def unknown_keywords(span: str) -> list[str]:
    """The keywords a code span passes to a call of the package's (a public
    name: ``RandomCrops(8.0, per_episode=4)``, ``streamer.pack(..., index=False)``)
    that its signature does not take."""
    try:
        tree = ast.parse(span, mode="eval")
    except SyntaxError:
        return []
    wrong = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name | ast.Attribute):
            continue
        name = ast.unparse(node.func).removeprefix("streamer.")
        if name.split(".")[0] not in streamer.__all__ or not resolve(f"streamer.{name}"):
            continue
        thing: Any = streamer
        for part in name.split("."):
            thing = getattr(thing, part)
        parameters = inspect.signature(thing).parameters
        if any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
            continue
        wrong += [f"{name}({k.arg}=)" for k in node.keywords if k.arg and k.arg not in parameters]
    return wrong


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_names_exist(page: Path) -> None:
    text = prose(page)
    names = span_names(text)
    for block in blocks(page):
        if block.lang == "python":
            names |= code_names(block.text)
    assert [n for n in sorted(names) if not resolve(n)] == []
    assert [w for span in spans(text) for w in unknown_keywords(span)] == []


def test_the_name_check_catches_drift() -> None:
    assert resolve("streamer.RandomCrops") and resolve("streamer.storage.registry.SCHEMES")
    assert resolve("streamer.torch.collate")  # with or without torch installed
    assert not resolve("streamer.RandomCrop")
    assert not resolve("streamer.torch.Collate")
    assert not resolve("streamer.storage.nothing.here")
    assert code_names("from streamer.torch import CropDataset\nstreamer.x.open(1).y") == {
        "streamer.torch.CropDataset",
        "streamer.x.open",
    }
    assert span_names("`streamer.Streamer`, `streamer.py`, `streamer.pack.plan`") == {
        "streamer.Streamer"
    }
    assert unknown_keywords("RandomCrops(8.0, per_episode=4)") == []
    assert unknown_keywords("streamer.pack(src, out, shard=3)") == ["pack(shard=)"]
    assert unknown_keywords("Dataset.read_crop(key, 1, 2, rate=16000)") == [
        "Dataset.read_crop(rate=)"
    ]


# -- python blocks ----------------------------------------------------------------


@pytest.fixture
def doc_places(
    docs_dataset: Path,
    docs_audio: Path,
    moto_endpoint: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[dict[str, str]]:
    """What the snippets' placeholders become: the docs' dataset served
    where they say it is, and their other paths made local ones."""
    local = tmp_path / "podcasts"
    shutil.copytree(docs_dataset, local)
    upload_tree(moto_endpoint, docs_dataset, "bucket", "podcasts", "test-key-id", SECRET)
    for name, value in {
        "AWS_ACCESS_KEY_ID": "test-key-id",
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": moto_endpoint,  # for the snippets that name no endpoint
        "B2_ENDPOINT_URL": moto_endpoint,
    }.items():
        monkeypatch.setenv(name, value)
    web = LoopbackServer(file_handler(docs_dataset.parent)).start()
    try:
        yield {
            '"https://..."': repr(moto_endpoint),
            '"https://s3.example.com"': repr(moto_endpoint),
            '"https://files.example.org/podcasts"': repr(f"{web.url}/podcasts"),
            '"/data/podcasts"': repr(str(local)),
            '"/audio/in"': repr(str(docs_audio / "in")),
            '"/nvme/cache"': repr(str(tmp_path / "cache")),
            '"/tmp/shard.wsds"': repr(str(tmp_path / "shard.wsds")),
        }
    finally:
        web.stop()


PYTHON_PAGES = [p for p in PAGES if any(b.lang == "python" for b in blocks(p))]


@pytest.mark.parametrize("page", PYTHON_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_python_blocks_run(page: Path, doc_places: dict[str, str]) -> None:
    """A page's python blocks, in order, in one namespace (a later block
    goes on from an earlier one's ``dataset``); top-level ``await`` as in
    a notebook."""
    namespace: dict[str, Any] = {"__name__": "__docs__"}
    for block in blocks(page):
        if block.lang != "python" or block.not_run:  # test_names_exist compiles those
            continue
        source = block.text
        for placeholder, value in doc_places.items():
            source = source.replace(placeholder, value)
        code = compile(source, block.where(), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        try:
            outcome = eval(code, namespace)  # a coroutine if the block awaits
            if asyncio.iscoroutine(outcome):
                asyncio.run(outcome)
        except Exception as exc:
            raise AssertionError(f"{block.where()}: {type(exc).__name__}: {exc}") from exc
