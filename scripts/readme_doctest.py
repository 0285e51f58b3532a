#!/usr/bin/env python3
"""The README doctest: run every command block of README.md as written, and fail if one fails.

    python scripts/readme_doctest.py             # every block, two at a time
    python scripts/readme_doctest.py --list      # what would run, what is skipped and why
    python scripts/readme_doctest.py --only Serving --jobs 1 --keep

CI runs it after the tests (``.ci/run``). Each fenced block of README.md is one step:

- ```` ```bash ```` blocks run with ``bash`` under ``set -euo pipefail``, ```` ```python ````
  blocks with this interpreter, each in a workspace of its own that looks like a fresh
  clone: a temporary folder holding links to the repository's files (what git tracks, and
  new files it does not ignore) with the shared data folder as ``../shared`` beside it, when
  this checkout has one. Commands are run from its root, so what they write (``sim-out/``,
  ``run.db``, ...) stays out of the checkout; this interpreter's ``bin`` folder (the venv's
  ``accelnet``) comes first on ``PATH``.
- ```` ```yaml ```` blocks are illustrations of files: each is written to a file and checked
  with ``accelnet job validate`` (a top-level ``jobs:`` key) or ``accelnet fabric validate``.
- The first block that installs the project (``pip install``: the setup, the demo and the
  test command) is skipped, and said to be: CI runs the setup and the tests itself, and the
  demo takes about half a minute. Blocks that read ``../shared`` are skipped, with a message,
  when this checkout has no shared data folder beside it.

Placeholders that only exist once the commands have run are substituted first:
``<job-id>`` by the id of the newest job ``$TOKEN``'s tenant sees on the server,
``<token-id>`` by the id of ``$TOKEN`` itself (``acn_<id>_<secret>``); any other
``<lower-case-word>`` in a bash block is an error. In the block that runs ``accelnet serve``
(the server runs until stopped), port 8765 is replaced by a free port, the ``accelnet
serve`` line runs in the background (its output in ``serve.log``), the lines after it wait
until ``/healthz`` answers, and the server is stopped (SIGTERM) when the block ends.

Some blocks must also print what the README says they print (``EXPECT``). A step that
fails prints its command's output; the exit status is 1 if any step failed.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"

FENCE = re.compile(r"^```([\w+-]*)\s*$")
HEADING = re.compile(r"^#{1,6}\s+(.*\S)\s*$")
PLACEHOLDER = re.compile(r"<([a-z][a-z0-9]*(?:-[a-z0-9]+)+)>")
SERVE_LINE = re.compile(r"^\s*accelnet\s+serve\b")
README_PORT = "8765"

#: The shell functions the placeholders are replaced by calls of (see the module's text).
SUBSTITUTES = {"job-id": "$(readme_job_id)", "token-id": "$(readme_token_id)"}

#: Output a block must show, by its section and language: regular expressions searched in
#: its output as printed (line by line) and with every run of whitespace made one space
#: (rich wraps long lines at the terminal's width).
EXPECT: dict[str, tuple[str, ...]] = {
    "The fabric/bash": (r"450 GB/s each way \(900 both\)",),
    "The fabric/python": (r"NETWORK_LEAF NET 25\.0 3\.9", r"^h100box/gpu0$"),
    "Running jobs/python": (r"^0\.36\d*$",),
    "Communication/bash": (r"in the given order: 50\.00 GB/s", r"8\.90"),
    "Serving a team/bash": (r'"name":"hello"', r"(^|\})hi$"),
}

DEFAULT_TIMEOUT_S = 300.0
SERVER_WAIT_S = 120.0


@dataclass(frozen=True)
class Block:
    """One fenced block of the README."""

    number: int  # 1-based, in the order of the page
    lang: str
    line: int  # of the opening fence, 1-based
    section: str  # the nearest heading above it
    text: str
    source: str = "README.md"

    @property
    def where(self) -> str:
        return f"{self.source}:{self.line} [{self.section}] {self.lang or 'text'}"


@dataclass(frozen=True)
class Step:
    """What the doctest does with a block: ``kind`` is run, serve, validate or skip."""

    block: Block
    kind: str
    why: str = ""


@dataclass(frozen=True)
class Outcome:
    step: Step
    ok: bool
    seconds: float
    output: str
    detail: str = ""


def parse_blocks(text: str, source: str = "README.md") -> list[Block]:
    """The fenced blocks of a markdown text, each with its language and section."""
    blocks: list[Block] = []
    section = ""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        heading = HEADING.match(lines[i])
        fence = FENCE.match(lines[i])
        if heading:
            section = heading.group(1)
        elif fence:
            start = i
            i += 1
            body: list[str] = []
            while i < len(lines) and lines[i].rstrip() != "```":
                body.append(lines[i])
                i += 1
            if i == len(lines):
                raise ValueError(f"{source}:{start + 1}: a code block is never closed")
            blocks.append(
                Block(
                    len(blocks) + 1,
                    fence.group(1),
                    start + 1,
                    section,
                    "\n".join(body) + "\n",
                    source,
                )
            )
        i += 1
    return blocks


def plan(blocks: list[Block], shared: Path = SHARED) -> list[Step]:
    """A step for every block: how it is run, or why it is not."""
    steps: list[Step] = []
    setup_seen = False
    for b in blocks:
        if b.lang == "bash" and not setup_seen and "pip install" in b.text:
            setup_seen = True
            why = (
                "setup, demo and tests, not run here: CI runs these itself (.ci/run), "
                "and the demo takes about half a minute"
            )
            steps.append(Step(b, "skip", why))
        elif b.lang in ("bash", "python") and "../shared/" in b.text and not shared.is_dir():
            steps.append(Step(b, "skip", f"reads ../shared, and {shared} is absent"))
        elif b.lang == "bash":
            serve = any(SERVE_LINE.match(line) for line in b.text.splitlines())
            steps.append(Step(b, "serve" if serve else "run"))
        elif b.lang == "python":
            steps.append(Step(b, "run"))
        elif b.lang in ("yaml", "yml"):
            steps.append(Step(b, "validate"))
        else:
            steps.append(Step(b, "skip", f"not a command block (language {b.lang or 'none'})"))
    return steps


def unknown_placeholders(text: str) -> list[str]:
    """Placeholders in a bash block that the doctest has no value for."""
    return sorted({m.group(1) for m in PLACEHOLDER.finditer(text)} - set(SUBSTITUTES))


def substitute(text: str) -> str:
    """A bash block with its placeholders replaced by the shell calls that know them."""
    return PLACEHOLDER.sub(lambda m: SUBSTITUTES.get(m.group(1), m.group(0)), text)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def shell_functions(port: int) -> str:
    """The functions the substituted placeholders call, and the server's wait."""
    base = f"http://127.0.0.1:{port}"
    newest = (
        "import json, sys; jobs = json.load(sys.stdin)['jobs']; "
        "print(max(jobs, key=lambda j: j['submitted_at'])['id'])"
    )
    return f"""\
readme_job_id() {{
  curl -sSf -H "Authorization: Bearer $TOKEN" "{base}/api/v1/jobs" | python -c "{newest}"
}}
readme_token_id() {{
  local rest=${{TOKEN#acn_}}
  printf '%s\\n' "${{rest%%_*}}"
}}
readme_wait_for_server() {{
  local deadline=$((SECONDS + {int(SERVER_WAIT_S)}))
  until curl -sf -o /dev/null "{base}/healthz"; do
    if ! kill -0 "$readme_server_pid" 2>/dev/null; then
      echo "readme doctest: accelnet serve exited; its output:" >&2; cat serve.log >&2
      return 1
    fi
    if ((SECONDS > deadline)); then
      echo "readme doctest: no answer on {base}/healthz after {int(SERVER_WAIT_S)} s" >&2
      return 1
    fi
    sleep 0.2
  done
}}
readme_stop_server() {{
  if [ -n "${{readme_server_pid:-}}" ]; then
    kill -TERM "$readme_server_pid" 2>/dev/null || true
    wait "$readme_server_pid" 2>/dev/null || true
  fi
}}
"""


def bash_script(block: Block, port: int) -> str:
    """The block as a bash script: placeholders substituted, a server started and stopped."""
    text = substitute(block.text)
    head = f"set -euo pipefail\n{shell_functions(port)}"
    if not any(SERVE_LINE.match(line) for line in text.splitlines()):
        return head + text
    text = re.sub(rf"\b{README_PORT}\b", str(port), text)
    out: list[str] = [head, "trap readme_stop_server EXIT\n"]
    for line in text.splitlines():
        if SERVE_LINE.match(line):
            # Its own lines: the line may end in a comment, which would swallow a trailing "&".
            out.append("{\n" + line + "\n} >serve.log 2>&1 &\n")
            out.append("readme_server_pid=$!\nreadme_wait_for_server\n")
        else:
            out.append(line + "\n")
    return "".join(out)


def repo_entries(root: Path) -> list[str]:
    """Top-level names a fresh clone has: tracked files and new ones git does not ignore."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
            cwd=root,
            capture_output=True,
            check=True,
            text=True,
            timeout=60,
        ).stdout
        names = {p.split("/", 1)[0] for p in listed.split("\0") if p}
    except (OSError, subprocess.SubprocessError):
        names = {p.name for p in root.iterdir()} - {".git", ".venv"}
    return sorted(n for n in names if (root / n).exists())


def make_workspace(parent: Path, entries: list[str]) -> Path:
    """``parent/clone``: links to the checkout's files, ``parent/shared`` beside it."""
    clone = parent / "clone"
    clone.mkdir(parents=True)
    for name in entries:
        (clone / name).symlink_to(ROOT / name)
    if SHARED.is_dir():
        (parent / "shared").symlink_to(SHARED)
    return clone


def environment() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHONUNBUFFERED"] = "1"
    return env


def command(step: Step, cwd: Path) -> list[str]:
    b = step.block
    if step.kind == "validate":
        path = cwd / f"readme-block-{b.number}.yaml"
        path.write_text(b.text)
        what = "job" if re.search(r"^jobs:", b.text, re.MULTILINE) else "fabric"
        return ["accelnet", what, "validate", path.name]
    if b.lang == "python":
        path = cwd / f"readme-block-{b.number}.py"
        path.write_text(b.text)
        return [sys.executable, path.name]
    path = cwd / f"readme-block-{b.number}.sh"
    path.write_text(bash_script(b, free_port()))
    return ["bash", path.name]


def run_process(argv: list[str], cwd: Path, timeout: float) -> tuple[int | None, str]:
    """Run in a session of its own; on timeout the whole group (a server too) is killed."""
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
        code: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        signal_group(proc.pid, signal.SIGTERM)
        try:
            out, _ = proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            signal_group(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
        code = None
    signal_group(proc.pid, signal.SIGKILL)  # anything the block left behind
    return code, out


def signal_group(pgid: int, sig: signal.Signals) -> None:
    """Signal the process group a block ran in, if anything of it is left."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def check_output(step: Step, output: str) -> str:
    """What the output lacks of what the README says the block prints ('' if nothing)."""
    flat = " ".join(output.split())
    missing = [
        p
        for p in EXPECT.get(f"{step.block.section}/{step.block.lang}", ())
        if not re.search(p, flat) and not re.search(p, output, re.M)
    ]
    return f"output lacks {', '.join(map(repr, missing))}" if missing else ""


def run_step(step: Step, scratch: Path, entries: list[str], timeout: float) -> Outcome:
    if step.kind == "skip":
        return Outcome(step, True, 0.0, "", step.why)
    unknown = unknown_placeholders(step.block.text) if step.block.lang == "bash" else []
    if unknown:
        return Outcome(step, False, 0.0, "", f"no value for placeholder(s) {unknown}")
    if "curl " in step.block.text and shutil.which("curl") is None:
        return Outcome(step, False, 0.0, "", "the block runs curl, and there is none on PATH")
    cwd = make_workspace(scratch / f"block-{step.block.number}", entries)
    start = time.monotonic()
    code, out = run_process(command(step, cwd), cwd, timeout)
    seconds = time.monotonic() - start
    log = cwd / "serve.log"
    if step.kind == "serve" and log.exists():
        out += "\n--- serve.log ---\n" + log.read_text(errors="replace")
    if code is None:
        return Outcome(step, False, seconds, out, f"timed out after {timeout:.0f} s")
    if code != 0:
        return Outcome(step, False, seconds, out, f"exit status {code}")
    lacks = check_output(step, out)
    return Outcome(step, not lacks, seconds, out, lacks)


def report(outcome: Outcome, lock: threading.Lock) -> None:
    step = outcome.step
    if step.kind == "skip":
        line = f"skip  {step.block.where}: {outcome.detail}"
    elif outcome.ok:
        line = f"ok    {step.block.where} ({step.kind}, {outcome.seconds:.1f} s)"
    else:
        tail = "\n".join(outcome.output.splitlines()[-60:])
        line = (
            f"FAIL  {step.block.where} ({step.kind}, {outcome.seconds:.1f} s): "
            f"{outcome.detail}\n{tail}\n--- end of output ---"
        )
    with lock:
        print(line, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--readme", type=Path, default=ROOT / "README.md")
    parser.add_argument(
        "--only", action="append", default=[], help="blocks whose section contains this"
    )
    parser.add_argument("--jobs", type=int, default=2, help="blocks run at once (default 2)")
    parser.add_argument(
        "--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds a block may take"
    )
    parser.add_argument("--list", action="store_true", help="print the steps, run nothing")
    parser.add_argument("--keep", action="store_true", help="keep the workspaces, say where")
    args = parser.parse_args(argv)

    steps = plan(parse_blocks(args.readme.read_text(), args.readme.name))
    if args.only:
        steps = [s for s in steps if any(o in s.block.section for o in args.only)]
    if args.list:
        for s in steps:
            print(f"{s.kind:8}  {s.block.where}{': ' + s.why if s.why else ''}")
        return 0
    entries = repo_entries(ROOT)
    scratch = Path(tempfile.mkdtemp(prefix="readme-doctest-"))
    scratch.chmod(0o711)  # `accelnet serve` as root runs tasks as tenants' users: they pass it
    lock = threading.Lock()
    start = time.monotonic()
    print(
        f"README doctest: {len(steps)} blocks of {args.readme}, {args.jobs} at a time, in {scratch}"
    )
    outcomes: list[Outcome] = []
    try:
        with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
            futures = [pool.submit(run_step, s, scratch, entries, args.timeout) for s in steps]
            for future in concurrent.futures.as_completed(futures):
                outcome = future.result()
                outcomes.append(outcome)
                report(outcome, lock)
    finally:
        if args.keep:
            print(f"workspaces kept in {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    failed = [o for o in outcomes if not o.ok]
    ran = sum(1 for o in outcomes if o.step.kind != "skip")
    skipped = len(outcomes) - ran
    print(
        f"README doctest: {ran - len(failed)} of {ran} blocks passed, {skipped} skipped, "
        f"in {time.monotonic() - start:.1f} s"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
