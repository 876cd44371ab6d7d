"""The README's quick start is what CI runs: .ci/run must run its test command."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def quick_start_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.+?)\n```", section)


def test_readme_has_the_two_quick_start_commands():
    main_job, tests = quick_start_commands()
    assert main_job == 'pip install -e ".[cpu]" && batchlab matrix run'
    assert tests.endswith("&& pytest")


def test_ci_runs_exactly_the_readme_test_command():
    tests = quick_start_commands()[1]
    ci_lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert tests in ci_lines
