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


def test_ci_runs_the_real_models_matrix_after_the_test_command():
    """The suite runs short real-model cells; matrices/real.toml's 32-step cells are CI's
    next step, and its exit status fails the job (set -e)."""
    tests = quick_start_commands()[1]
    ci_lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    step = [i for i, line in enumerate(ci_lines)
            if line.startswith("batchlab matrix run --matrix matrices/real.toml")]
    assert "set -euo pipefail" in ci_lines
    assert len(step) == 1 and step[0] > ci_lines.index(tests)
    assert "--filter" not in ci_lines[step[0]] and "--shard" not in ci_lines[step[0]]
