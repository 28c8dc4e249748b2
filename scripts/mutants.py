"""`make mutants`: mutation testing of the modules that hold Gatehouse's guarantees, within a time budget.

For each module in scripts/mutants.toml (or those named in MUTANTS_MODULES,
comma-separated), in a scratch copy of the project (var/mutants/work/<module>):
mutmut 3 mutates the module and runs the module's tests against every mutant
(``fast`` tests; ``deep`` ones too with MUTANTS_DEEP=1; without it tests marked
integration, embedded or faults are deselected even in the ``fast`` files).
MUTANTS_ONLY=fn,fn mutates only the named functions of the module (instead of
its ``only`` list, or all of it). The tests run from the
scratch copy, so worker processes they start see the mutant as well
(MUTANTS_TESTS=path,path replaces the listed tests). The whole
run stops after MUTANTS_BUDGET minutes (default 30), split evenly between the
modules; a mutant not reached in time is reported as not checked.

Writes var/mutants/<module>.md (score, survivors with their diff) and
var/mutants/summary.md + summary.json (the score of every module). A survivor in
a guard condition needs a test that kills it, or a line in
docs/mutation-testing.md saying why it is equivalent.

Needs the test services (PostgreSQL, Redis) and the dev extra (mutmut).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "var" / "mutants"
SKIP = {".git", "var", "mutants", ".venv", "node_modules", ".pytest_cache", ".mypy_cache", ".ruff_cache", "bench"}
STATUS = re.compile(r"^\s+(\S+): (.+)$")
# The in-process tests (`make test-fast`); MUTANTS_DEEP=1 runs the marked ones too.
FAST_MARKERS = "not integration and not embedded and not faults"


def main() -> int:
    config = tomllib.loads((ROOT / "scripts" / "mutants.toml").read_text())["modules"]
    wanted = [m for m in os.environ.get("MUTANTS_MODULES", "").split(",") if m] or list(config)
    unknown = [m for m in wanted if m not in config]
    if unknown:
        print(f"not in scripts/mutants.toml: {unknown}", file=sys.stderr)
        return 2
    budget = float(os.environ.get("MUTANTS_BUDGET", "30")) * 60
    deep = os.environ.get("MUTANTS_DEEP") == "1"
    OUT.mkdir(parents=True, exist_ok=True)
    # Modules not run this time keep their last result in the summary (_write_summary).
    started = time.monotonic()
    for index, module in enumerate(wanted):
        left = budget - (time.monotonic() - started)
        share = left / (len(wanted) - index)
        result = _run_module(module, config[module], share, deep)
        _write_summary({module: result})
    print((OUT / "summary.md").read_text())
    return 0


def _run_module(module: str, spec: dict[str, list[str]], budget: float, deep: bool) -> dict[str, object]:
    slug = module.removesuffix(".py").replace("/", ".")
    work = OUT / "work" / slug
    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(ROOT, work, ignore=lambda d, names: [n for n in names if n in SKIP or n == "__pycache__"])
    tests = list(spec["fast"]) + (list(spec.get("deep", [])) if deep else [])
    if os.environ.get("MUTANTS_TESTS"):  # what do these tests alone kill? (e.g. the suite before a change)
        tests = os.environ["MUTANTS_TESTS"].split(",")
    top = sorted(p.name for p in work.iterdir() if p.name not in {"pyproject.toml"})
    pytest_args = ["-p", "no:cacheprovider", "-q"]
    if not deep:
        # Worker processes, the embedded stack and fault injection take seconds to minutes per
        # mutant: without MUTANTS_DEEP=1 only the in-process tests of the listed files run.
        pytest_args += ["-m", FAST_MARKERS]
    pytest_args += [f"--deselect={node}" for node in spec.get("deselect", [])]
    with open(work / "pyproject.toml", "a") as fh:
        fh.write(
            "\n[tool.mutmut]\n"
            f"source_paths = [{json.dumps(module)}]\n"
            f"also_copy = {json.dumps([*top, 'pyproject.toml'])}\n"
            f"pytest_add_cli_args = {json.dumps(pytest_args)}\n"
            f"pytest_add_cli_args_test_selection = {json.dumps(tests)}\n"
        )
    only = [f for f in os.environ.get("MUTANTS_ONLY", "").split(",") if f] or list(spec.get("only", []))
    names = [f"{slug}.x{_mangle(fn)}__mutmut_*" for fn in only]
    env = {
        **os.environ,
        # One database kept across the per-mutant test sessions (tests/conftest.py).
        "GATEHOUSE_TEST_KEEPDB": f"test_gatehouse_mutants_{slug.replace('.', '_')}",
    }
    print(f"== {module}: {len(tests)} test path(s), budget {budget / 60:.1f} min", flush=True)
    log = open(OUT / f"{slug}.log", "w")  # noqa: SIM115 - closed below
    # Its own process group: at the budget the forked per-mutant children stop with mutmut.
    proc = subprocess.Popen(
        [sys.executable, "-m", "mutmut", "run", "--max-children", "1", *names],
        cwd=work,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        proc.wait(timeout=max(budget, 60))
        timed_out = False
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        log.close()
    statuses = _statuses(work, env)
    if names:
        only = tuple(n.removesuffix("*") for n in names)
        statuses = {k: v for k, v in statuses.items() if k.startswith(only)}
    counts: dict[str, int] = {}
    for status in statuses.values():
        counts[status] = counts.get(status, 0) + 1
    killed = counts.get("killed", 0) + counts.get("timeout", 0)
    checked = killed + counts.get("survived", 0) + counts.get("suspicious", 0)
    # Mutants the budget cut off before their turn ("not checked") or that no selected test reaches
    # ("no tests") are not in the score; the report counts them.
    not_reached = counts.get("not checked", 0)
    score = round(100 * killed / checked, 1) if checked else None
    survivors = sorted(k for k, v in statuses.items() if v in ("survived", "suspicious"))
    lines = [
        f"# Mutants of `{module}`",
        "",
        f"- tests: {', '.join(f'`{t}`' for t in tests)}",
        f"- functions: {', '.join(only) or 'all'}",
        f"- markers: {'all (MUTANTS_DEEP=1)' if deep else FAST_MARKERS}",
        f"- score: **{score}%** ({killed} killed of {checked} checked)" if score is not None else "- score: n/a",
        f"- by status: {json.dumps(counts, sort_keys=True)}",
        f"- stopped by the time budget: {'yes' if timed_out else 'no'}",
        "",
        "## Survivors",
        "",
    ]
    diffs = _diffs(work, env, survivors)
    for name in survivors:
        lines += [f"### {name}", "", "```diff", diffs.get(name, "(no diff)").strip(), "```", ""]
    if not survivors:
        lines.append("none")
    (OUT / f"{slug}.md").write_text("\n".join(lines) + "\n")
    _drop_database(env["GATEHOUSE_TEST_KEEPDB"])
    return {
        "score": score,
        "killed": killed,
        "checked": checked,
        "not_reached": not_reached,
        "counts": counts,
        "timed_out": timed_out,
        "functions": only,
        "tests": tests,
    }


# Every survivor's diff in one process (`mutmut show` per mutant costs an interpreter start each).
_DIFFS = """
import json, sys
from mutmut.mutation.diff_apply import find_mutant, get_diff_for_mutant
out = {}
for name in json.load(sys.stdin):
    try:
        out[name] = get_diff_for_mutant(name, path=find_mutant(name).path)
    except Exception as exc:
        out[name] = f"(no diff: {exc!r})"
print(json.dumps(out))
"""


def _diffs(work: Path, env: dict[str, str], names: list[str]) -> dict[str, str]:
    if not names:
        return {}
    done = subprocess.run(
        [sys.executable, "-c", _DIFFS], cwd=work, env=env, input=json.dumps(names), capture_output=True, text=True
    )
    try:
        return dict(json.loads(done.stdout))
    except ValueError:
        return {name: f"(no diff: {done.stderr.strip()[-300:]})" for name in names}


def _mangle(function: str) -> str:
    # mutmut names a function's mutants x_<name>__mutmut_<n> (methods: xǁClassǁname)
    return f"_{function}"


def _statuses(work: Path, env: dict[str, str]) -> dict[str, str]:
    done = subprocess.run(
        [sys.executable, "-m", "mutmut", "results", "--all", "true"], cwd=work, env=env, capture_output=True, text=True
    )
    return {m.group(1): m.group(2).strip() for line in done.stdout.splitlines() if (m := STATUS.match(line))}


def _drop_database(name: str) -> None:
    import psycopg

    url = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/gatehouse")
    match = re.match(r"postgres(?:ql)?://([^@/]+)@([^:/]+)(?::(\d+))?/", url)
    user, host, port = (
        (match.group(1), match.group(2), match.group(3) or "5432") if match else ("postgres", "127.0.0.1", "5432")
    )
    with psycopg.connect(host=host, port=port, user=user, dbname="postgres", autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", [name])
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')


def _write_summary(summary: dict[str, dict[str, object]]) -> None:
    # Two runs over different modules may finish in any order: keep what the other wrote.
    path = OUT / "summary.json"
    on_disk = json.loads(path.read_text()) if path.exists() else {}
    summary = {**on_disk, **summary}
    (OUT / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True))
    rows = [
        "| module | score | killed / checked | not reached in budget | by status | budget hit |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for module, result in sorted(summary.items()):
        score = f"{result['score']}%" if result["score"] is not None else "n/a"
        rows.append(
            f"| `{module}` | {score} | {result['killed']} / {result['checked']} | {result.get('not_reached', '?')} | "
            f"{json.dumps(result['counts'], sort_keys=True)} | {'yes' if result['timed_out'] else 'no'} |"
        )
    (OUT / "summary.md").write_text("# Mutation scores\n\n" + "\n".join(rows) + "\n")


if __name__ == "__main__":
    sys.exit(main())
