"""Every table in docs/*.md and the README marked ``<!-- generated: COMMAND -->`` is what COMMAND
prints from the committed rows today, and ``benchmarks/doc_tables.py --list`` names every such
table in docs/ (issue 62, item 2). The commands only read CSVs and reports: no training."""

import glob
import os
import re
import subprocess
import sys

import pytest

from conftest import REPO

MARK = re.compile(r"^<!-- generated: (python \S+.*?) -->$")


def _marked() -> list[tuple[str, int, str]]:
    """(page, line index of the mark, command) for every marked table."""
    found = []
    for page in ["README.md", *sorted(os.path.relpath(p, REPO) for p in glob.glob(f"{REPO}/docs/*.md"))]:
        lines = open(f"{REPO}/{page}", encoding="utf-8").read().splitlines()
        found += [(page, i, m.group(1)) for i, line in enumerate(lines) if (m := MARK.match(line))]
    return found


def _run(command: str) -> str:
    args = command.split()
    assert args[0] == "python", command
    proc = subprocess.run([sys.executable, *args[1:]], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"{command}: {proc.stderr[-2000:]}"
    return proc.stdout


def test_docs_mark_their_generated_tables():
    assert len([m for m in _marked() if m[0].startswith("docs/")]) >= 15


@pytest.mark.parametrize("page,index,command", _marked(), ids=lambda x: str(x))
def test_marked_table_is_what_its_command_prints(page, index, command):
    want = [line.rstrip() for line in _run(command).rstrip("\n").split("\n")]
    lines = open(f"{REPO}/{page}", encoding="utf-8").read().splitlines()
    have = [line.rstrip() for line in lines[index + 1:index + 1 + len(want)]]
    assert have == want, f"{page}: the table under '{command}' is stale; paste that command's output there"
    after = lines[index + 1 + len(want)] if index + 1 + len(want) < len(lines) else ""
    assert not after.startswith("|"), f"{page}: rows under '{command}' that it does not print"


def test_list_names_every_marked_table_in_docs():
    listed = {(doc, command) for doc, _, command in
              (line.split("\t")[1:] for line in _run("python benchmarks/doc_tables.py --list").splitlines())}
    marked = {(page, command) for page, _, command in _marked() if page.startswith("docs/")}
    assert marked <= listed, f"doc_tables.py --list lacks {sorted(marked - listed)}"
