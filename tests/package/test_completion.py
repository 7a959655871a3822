# SPDX-License-Identifier: MIT
"""bash completion for shunt (packaging/bash-completion/shunt), driven the
way bash drives it: COMP_WORDS and COMP_CWORD set, the function that
`complete -p shunt` names called, COMPREPLY read back. The commands and
each command's options it offers are the ones --help lists."""

import re
import shutil
import subprocess

import pytest

OPTION = re.compile(r"(?<![\w-])--[a-z][a-z-]+")


@pytest.fixture(scope="module")
def complete(repo_root):
    if not shutil.which("bash"):
        pytest.skip("no bash")
    script = repo_root / "packaging" / "bash-completion" / "shunt"

    def run(line):
        """Completions of the last word of @line (a trailing space: a new word)."""
        words = line.split()
        if line.endswith(" "):
            words.append("")
        prog = ["source \"$1\"", "shift",
                "spec=$(complete -p shunt) || exit 3",
                "func=$(sed -n 's/.*-F \\([^ ]*\\).*/\\1/p' <<<\"$spec\")",
                "COMP_WORDS=(\"$@\")", "COMP_CWORD=$(($# - 1))",
                "COMP_LINE=\"$*\"", "COMP_POINT=${#COMP_LINE}",
                "\"$func\" shunt \"${COMP_WORDS[COMP_CWORD]}\" \"${COMP_WORDS[COMP_CWORD-1]}\"",
                "printf '%s\\n' \"${COMPREPLY[@]}\""]
        res = subprocess.run(["bash", "-c", "\n".join(prog), "bash", str(script), *words],
                             capture_output=True, text=True, timeout=30)
        assert res.returncode == 0, res.stderr
        return sorted(x for x in res.stdout.splitlines() if x)
    return run


def help_of(shunt, *argv):
    return subprocess.run([str(shunt), *argv], capture_output=True, text=True,
                          timeout=30).stdout


def test_commands(complete, shunt_cli):
    listed = re.findall(r"^  (\w+) ", help_of(shunt_cli(), "--help").split("commands:")[1], re.M)
    assert complete("shunt ") == sorted(listed + ["--help"])
    assert complete("shunt st") == ["status"]
    assert complete("shunt co") == ["compare"]


@pytest.mark.parametrize("cmd", ["run", "daemon", "status", "compare"])
def test_options_are_the_ones_help_lists(complete, shunt_cli, cmd):
    said = set(OPTION.findall(help_of(shunt_cli(), cmd, "--help"))) | {"--help"}
    offered = set(complete(f"shunt {cmd} --")) - {"--"}
    assert offered == said


def test_policy(complete):
    assert complete("shunt policy ") == ["--help", "check"]
    assert complete("shunt policy check --c") == ["--config"]


def test_option_values(complete, tmp_path):
    assert complete("shunt status --transport ") == ["kernel", "shm"]
    assert complete("shunt daemon --log i") == ["info"]
    (tmp_path / "policy.conf").write_text("")
    assert complete(f"shunt policy check --config {tmp_path}/pol") == [f"{tmp_path}/policy.conf"]


def test_programs_to_run(complete):
    assert "bash" in complete("shunt run bas")
    assert "bash" in complete("shunt run --socket /x -- bas")
    assert "bash" in complete("shunt compare --json -- bas")
    assert "bash" in complete("shunt compare -- sleep 1 -- bas")
    assert complete("shunt compare --js") == ["--json"]
