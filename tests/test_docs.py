"""The README and docs/ as a reader meets them: every relative link lands, the README stays
a newcomer's page whose test command is the one CI runs, and the measurement tables in
docs/results.md are what the benchmark scripts print from the committed CSVs."""

import glob
import os
import re

from conftest import REPO, run_python

PAGES = ["README.md", *sorted(os.path.relpath(p, REPO) for p in glob.glob(f"{REPO}/docs/*.md")),
         "benchmarks/README.md", "jobs/README.md"]


def _outside_code(text: str) -> str:
    return re.sub(r"```.*?```", "", text, flags=re.S)


def _anchors(path: str) -> set[str]:
    """GitHub's heading ids: lower case, punctuation dropped, spaces to hyphens."""
    text = _outside_code(open(path, encoding="utf-8").read())
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
            for h in re.findall(r"^#+ (.*)$", text, re.M)}


def test_every_relative_link_in_readme_and_docs_resolves():
    broken, seen = [], 0
    for page in PAGES:
        text = _outside_code(open(f"{REPO}/{page}", encoding="utf-8").read())
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+://", target):
                continue
            seen += 1
            path, _, anchor = target.partition("#")
            full = os.path.normpath(os.path.join(REPO, os.path.dirname(page), path)) if path else f"{REPO}/{page}"
            if not os.path.exists(full):
                broken.append(f"{page}: {target} (no such file)")
            elif anchor and full.endswith(".md") and anchor not in _anchors(full):
                broken.append(f"{page}: {target} (no such heading)")
    assert seen > 50 and not broken, broken


def test_readme_is_short_and_runs_the_test_command_ci_runs():
    readme = open(f"{REPO}/README.md", encoding="utf-8").read()
    assert len(readme.splitlines()) <= 350
    ci = open(f"{REPO}/.ci/run", encoding="utf-8").read()
    line = next(x for x in ci.splitlines() if x.startswith("python -m pytest -q && mpiexec"))
    command = line.split(" || exit")[0]
    first_block = re.search(r"```bash\n(.*?)```", readme, re.S).group(1)
    lines = first_block.splitlines()
    assert any(x.endswith(f"&& {command}") for x in lines)  # the install, then exactly what CI runs
    assert any(x.endswith("&& mpirun -n 4 python -m fdahpc.train") for x in lines)


def _table_rows(text: str) -> list[str]:
    return [x for x in text.splitlines() if x.startswith("| ")]


def test_results_tables_are_what_the_benchmarks_print_from_their_csvs():
    results = open(f"{REPO}/docs/results.md", encoding="utf-8").read()
    for script in (["benchmarks/time_to_accuracy.py", "--markdown"], ["benchmarks/fedqs_regime.py", "--table"]):
        proc = run_python(script, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        rows = _table_rows(proc.stdout)
        stale = [r for r in rows if r not in results]
        assert len(rows) > 20 and not stale, f"{' '.join(script)}: docs/results.md lacks {stale[:3]}"


def test_readme_fedqs_table_is_what_the_grid_summary_prints():
    """The README's FedQS table (clock × variant × feedback × partition) is the one
    ``fedqs_regime.py --summary`` prints from the committed CSVs, with that command beside it."""
    readme = open(f"{REPO}/README.md", encoding="utf-8").read()
    proc = run_python(["benchmarks/fedqs_regime.py", "--summary"], timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = _table_rows(proc.stdout)
    assert len(rows) >= 5 and not [r for r in rows if r not in readme], "README: rerun fedqs_regime.py --summary"
    assert "python benchmarks/fedqs_regime.py --summary" in readme


def test_readme_regret_table_is_what_regret_py_prints():
    """The README's opening answer (the untuned defaults' regret per workload) is the table
    ``regret.py --markdown`` prints from the committed CSVs, with its command beside it."""
    readme = open(f"{REPO}/README.md", encoding="utf-8").read()
    command = [x for x in readme.split("`") if x.startswith("python benchmarks/regret.py ")][0]
    proc = run_python(command.split()[1:], timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = _table_rows(proc.stdout)
    assert len(rows) >= 4 and not [r for r in rows if r not in readme], f"README: rerun {command}"


def test_benchmarks_folder_holds_commands_and_every_named_output_lies_in_results():
    """benchmarks/ holds scripts, shell drivers and its README; what they wrote lives in
    benchmarks/results/. Every output path the docs, README, code and tests name is a
    results/ path of a file that is there, so neither a stray output nor a stale path
    survives a change."""
    bench = f"{REPO}/benchmarks"
    stray = [name for name in os.listdir(bench) if os.path.isfile(f"{bench}/{name}")
             and not (name.endswith((".py", ".sh")) or name == "README.md")]
    assert not stray, f"outputs at benchmarks/ top level (move them to benchmarks/results/): {stray}"
    results = os.listdir(f"{bench}/results")
    assert "frontier.csv" in results and not [n for n in results if n.endswith((".py", ".sh"))]
    named = {}  # path -> the first file naming it
    files = [*glob.glob(f"{REPO}/*.md"), *glob.glob(f"{REPO}/docs/*.md"), *glob.glob(f"{REPO}/jobs/*"),
             *glob.glob(f"{bench}/*"), *glob.glob(f"{bench}/results/*.txt"), *glob.glob(f"{REPO}/fdahpc/**/*.py", recursive=True),
             *glob.glob(f"{REPO}/tests/*.py")]
    for path in files:
        if os.path.isfile(path):
            for hit in re.findall(r"benchmarks/[\w./-]+?\.(?:csv|txt|png|json)\b", open(path, encoding="utf-8").read()):
                named.setdefault(hit, os.path.relpath(path, REPO))
    assert len(named) > 20
    # a figure a run writes beside its committed CSV (comm_cost.png) counts as there: same run, same stem
    wrong = [f"{where}: {hit}" for hit, where in sorted(named.items())
             if not hit.startswith("benchmarks/results/") or not glob.glob(f"{REPO}/{os.path.splitext(hit)[0]}.*")]
    assert not wrong, wrong
