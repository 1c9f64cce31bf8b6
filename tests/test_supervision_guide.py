"""docs/supervision.md runs as written: every ```python block, in document order.

The guide's convention (stated near its top):

* a block whose first line is ``# file: NAME.py`` is a module, written to
  ``NAME.py`` (a later block with the same name replaces it);
* ``# file: test_NAME.py`` is a pytest file, run with ``python -m pytest -q``
  in that directory, which must pass;
* any other block is a script, run with ``python -c`` in that directory,
  which must exit 0.

One test per block. Each runs in a fresh temporary directory holding every
module written by the blocks before it (and by itself), in a subprocess
whose environment has no ``PYTHONPATH`` (the package is installed), a free
``BANK_PORT``, its own runtime and temporary directories, and a marker
variable: every process the block started inherits the marker, so any still
alive once the block is done is found, killed, and fails the test. A
failure names the block's line in the guide (and, for a script's
traceback, the guide's line of each frame).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from supervision.testing import cmdline, marked_processes
from tests.procs import free_port

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "supervision.md"
GUIDE_NAME = GUIDE.relative_to(ROOT).as_posix()

#: Seconds a block may run (each takes a few seconds; a minute means it hangs).
BLOCK_TIMEOUT = 60.0
#: Seconds a block's processes may take to be gone after it exited.
LEAK_GRACE = 5.0
#: The environment variable that marks every process a block starts.
MARKER = "SUPERVISION_GUIDE_BLOCK"

FENCE = re.compile(r"^```(\S*)\s*$")
SCRIPT_LINE = re.compile(r'File "<string>", line (\d+)')
FILE_LINE = re.compile(r"^# file: ([A-Za-z_][A-Za-z0-9_]*\.py)\s*$")
#: Languages of fenced blocks that are not run (anything else is a mistake
#: that would silently skip a block: ```py, ```python3...).
NOT_RUN = {"sh", "text"}


@dataclass(frozen=True)
class Block:
    """One fenced ```python block of the guide."""

    line: int  # 1-based line of the opening fence
    code: str
    file: str | None  # the NAME.py of a "# file:" block

    @property
    def kind(self) -> str:
        """``module``, ``test`` (a pytest file) or ``script``."""
        if self.file is None:
            return "script"
        return "test" if self.file.startswith("test_") else "module"

    @property
    def id(self) -> str:
        """The test id: the fence's line and the file name."""
        return f"L{self.line}-{self.file or 'script'}"


def fenced_blocks(text: str) -> list[tuple[int, str, str]]:
    """(line, language, code) of each top-level fenced block."""
    found = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if match is None:
            i += 1
            continue
        start, language = i + 1, match.group(1)
        body = []
        i += 1
        while i < len(lines) and lines[i].rstrip() != "```":
            body.append(lines[i])
            i += 1
        if i == len(lines):
            raise ValueError(f"{GUIDE_NAME}:{start}: unclosed code block")
        found.append((start, language, "\n".join(body) + "\n"))
        i += 1
    return found


def guide_blocks() -> list[Block]:
    """The guide's ```python blocks, in document order."""
    blocks = []
    for line, language, code in fenced_blocks(GUIDE.read_text()):
        if language != "python":
            continue
        first = code.splitlines()[0] if code.strip() else ""
        match = FILE_LINE.match(first)
        blocks.append(Block(line, code, match.group(1) if match else None))
    return blocks


BLOCKS = guide_blocks()


def files_up_to(block: Block) -> dict[str, str]:
    """The modules written by the blocks before ``block`` and by itself."""
    files: dict[str, str] = {}
    for earlier in BLOCKS:
        if earlier.line > block.line:
            break
        if earlier.file is not None:
            files[earlier.file] = earlier.code
    return files


def block_env(directory: Path, token: str) -> dict[str, str]:
    """The environment of a block's subprocess (see the module docstring)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("PYTEST_")}
    env.setdefault("THESPLOG_FILE", str(directory / "thespian.log"))
    env["OTPJOBS_RUNTIME_DIR"] = str(directory / "runtime")
    # running_node leaves its temporary directory (reports, runtime file)
    # behind: keep those under the test's own directory, not in /tmp.
    (directory / "tmp").mkdir(exist_ok=True)
    env["TMPDIR"] = str(directory / "tmp")
    env["BANK_PORT"] = str(free_port())
    env[MARKER] = token
    return env


def leftovers(token: str) -> list[str]:
    """Wait for the block's processes to end; kill and describe any that do not."""
    deadline = time.monotonic() + LEAK_GRACE
    survivors = marked_processes(token, MARKER)
    while survivors and time.monotonic() < deadline:
        time.sleep(0.05)
        survivors = marked_processes(token, MARKER)
    described = [f"{pid} ({cmdline(pid)})" for pid in survivors]
    for pid in survivors:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return described


def tail(path: Path, limit: int = 4000) -> str:
    """The end of a block's output file."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return ""
    return text if len(text) <= limit else "...\n" + text[-limit:]


def with_guide_lines(text: str, block: Block) -> str:
    """Tracebacks of a ``python -c`` script name ``"<string>", line N``: add
    the guide's line (the script's line N is N lines below the fence)."""
    return SCRIPT_LINE.sub(lambda m: f"{m.group(0)} [{GUIDE_NAME}:{block.line + int(m.group(1))}]", text)


def test_the_guide_has_blocks_of_every_kind_and_no_unknown_fences() -> None:
    kinds = {block.kind for block in BLOCKS}
    assert kinds == {"module", "test", "script"}, kinds
    unknown = [
        (line, language)
        for line, language, _ in fenced_blocks(GUIDE.read_text())
        if language != "python" and language not in NOT_RUN
    ]
    assert unknown == [], f"{GUIDE_NAME}: fenced blocks in a language that is neither run nor known: {unknown}"


#: What makes a block slow (a second or more on a loaded machine): it starts
#: a node (running_node, or from the command line), kills processes or sends
#: exit signals, sleeps, or waits out a leak; a pytest file is slow too.
SLOW_BLOCK = ("running_node(", '"node", "start"', "os.kill", "SIGKILL", ".exit(", "time.sleep(", "LeakedProcesses")


def is_slow(block: Block) -> bool:
    """A block for the slow tier (``pytest -m slow``) rather than the quick loop
    (a module block only writes a file: never slow)."""
    return block.kind == "test" or (block.kind == "script" and any(sign in block.code for sign in SLOW_BLOCK))


@pytest.mark.parametrize(
    "block", [pytest.param(block, id=block.id, marks=pytest.mark.slow if is_slow(block) else ()) for block in BLOCKS]
)
def test_guide_block(block: Block, tmp_path: Path) -> None:
    for name, code in files_up_to(block).items():
        (tmp_path / name).write_text(code)
    if block.kind == "module":
        command = [sys.executable, "-c", f"import {block.file[:-3]}"]
    elif block.kind == "test":
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", block.file]
    else:
        command = [sys.executable, "-c", block.code]
    token = uuid.uuid4().hex
    out, err = tmp_path / "block.stdout", tmp_path / "block.stderr"
    where = f"{GUIDE_NAME}:{block.line} ({block.kind} {block.file or ''})".replace(" )", ")")
    started = time.monotonic()
    # Output goes to files, not pipes: a node's daemons inherit them, and a
    # leaked one would hold a pipe open.
    with open(out, "w") as stdout, open(err, "w") as stderr:
        try:
            rc: int | None = subprocess.run(
                command,
                cwd=tmp_path,
                env=block_env(tmp_path, token),
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
                timeout=BLOCK_TIMEOUT,
            ).returncode
        except subprocess.TimeoutExpired:
            rc = None
    took = time.monotonic() - started
    leaked = leftovers(token)
    output = f"\n--- stdout ---\n{tail(out)}\n--- stderr ---\n{tail(err)}"
    if block.kind == "script":
        output = with_guide_lines(output, block)
    problems = []
    if rc is None:
        problems.append(f"still running after {BLOCK_TIMEOUT:.0f} s (killed)")
    elif rc != 0:
        problems.append(f"exited with {rc} after {took:.1f} s")
    if leaked:
        problems.append(f"left {len(leaked)} process(es) running (killed now): {', '.join(leaked)}")
    if problems:
        pytest.fail(f"{where}: {'; '.join(problems)}{output}", pytrace=False)
