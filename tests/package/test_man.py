# SPDX-License-Identifier: MIT
"""The manual pages: each renders without a groff warning (groff -ww, and
`man -l`), and says what the programs' --help says: the same commands, the
same options per command, the environment variables the library reads and
the keys the policy parser takes."""

import os
import pathlib
import re
import shutil
import subprocess

import pytest

PAGES = ["shunt.1", "shuntd.8", "shunt.conf.5", "libshunt.7"]
OPTION = re.compile(r"(?<![\w-])--[a-z][a-z-]+")


@pytest.fixture(scope="module")
def man_dir(build_dir):
    d = build_dir / "man"
    missing = [p for p in PAGES if not (d / p).exists()]
    if missing:
        if not shutil.which("scdoc"):
            pytest.skip("the manual pages need scdoc to be built (scripts/setup installs it)")
        pytest.fail(f"scdoc is installed but {missing} were not built in {d}", pytrace=False)
    return d


def render(page):
    """The page as plain text, and what groff said while rendering it."""
    res = subprocess.run(["groff", "-ww", "-man", "-Tutf8", "-P-cbou", str(page)],
                         capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, LC_ALL="C.UTF-8"))
    assert res.returncode == 0, res.stderr
    return res.stdout, res.stderr


def help_text(*argv):
    res = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, f"{argv}: {res.returncode} {res.stderr}"
    return res.stdout


@pytest.mark.parametrize("page", PAGES)
def test_page_renders_without_warnings(man_dir, page):
    text, warnings = render(man_dir / page)
    assert warnings == "", f"groff -ww on {page}:\n{warnings}"
    assert "NAME" in text and "SEE ALSO" in text
    res = subprocess.run(["man", "--warnings=w", "-l", str(man_dir / page)], capture_output=True,
                         text=True, timeout=60, env=dict(os.environ, MANPAGER="cat", PAGER="cat",
                                                         MANWIDTH="80"))
    assert res.returncode == 0 and res.stderr == "", res.stderr
    assert res.stdout.strip()


def commands_of_help(shunt):
    out = help_text(shunt, "--help")
    block = out.split("commands:", 1)[1]
    return [m.group(1) for m in re.finditer(r"^  (\w+) ", block, re.M)]


def sections_of_shunt_page(man_dir):
    """{command: text of its section} from shunt(1)'s COMMANDS."""
    text, _ = render(man_dir / "shunt.1")
    body = text.split("\nCOMMANDS\n", 1)[1].split("\nEXIT STATUS\n", 1)[0]
    parts = re.split(r"^   shunt (\w+)\n", body, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def test_every_command_has_a_section(man_dir, shunt_cli):
    assert sorted(commands_of_help(shunt_cli())) == sorted(sections_of_shunt_page(man_dir))


def test_each_commands_options_agree_with_its_help(man_dir, shunt_cli):
    shunt = shunt_cli()
    sections = sections_of_shunt_page(man_dir)
    for cmd in commands_of_help(shunt):
        if cmd == "daemon":
            continue	# shuntd's own options: shuntd(8), below
        said = set(OPTION.findall(help_text(shunt, cmd, "--help"))) - {"--help"}
        documented = set(OPTION.findall(sections[cmd])) - {"--help"}
        assert said == documented, f"shunt {cmd}: --help {sorted(said)} vs shunt(1) {sorted(documented)}"
    assert "shuntd(8)" in sections["daemon"]


def test_shuntd_options_agree_with_its_help(man_dir, build_dir, shunt_cli):
    text, _ = render(man_dir / "shuntd.8")
    options = text.split("\nOPTIONS\n", 1)[1].split("\nSIGNALS\n", 1)[0]
    synopsis = text.split("\nSYNOPSIS\n", 1)[1].split("\nDESCRIPTION\n", 1)[0]
    said = set(OPTION.findall(help_text(build_dir / "src" / "daemon" / "shuntd", "--help")))
    via_shunt = set(OPTION.findall(help_text(shunt_cli(), "daemon", "--help")))
    assert via_shunt == said
    assert said - {"--help"} == set(OPTION.findall(options)) - {"--help"}
    assert said - {"--help"} == set(OPTION.findall(synopsis))


def test_libshunt_page_names_every_variable_the_library_reads(man_dir, repo_root, shunt_cli):
    text, _ = render(man_dir / "libshunt.7")
    env = text.split("\nENVIRONMENT\n", 1)[1].split("\nNOTES\n", 1)[0]
    documented = set(re.findall(r"\bSHUNT_[A-Z_]+", env))
    read = set()
    for d in ("src/preload", "src/common"):
        for f in (repo_root / d).glob("*.c"):
            read |= set(re.findall(r'getenv\("(SHUNT_[A-Z_]+)"\)', f.read_text()))
    assert read and read <= documented, f"read by the library, not in libshunt(7): {read - documented}"
    said = set(re.findall(r"\bSHUNT_[A-Z_]+", help_text(shunt_cli(), "run", "--help")))
    assert said - {"SHUNT_SOCKET"} <= documented, said - documented


def test_shunt_conf_page_names_every_key_of_the_parser(man_dir, repo_root):
    text, _ = render(man_dir / "shunt.conf.5")
    source = (repo_root / "src" / "policy" / "policy.c").read_text()
    keys = set(re.findall(r'strcmp\(key, "(\w+)"\)', source))
    sections = set(re.findall(r'strn?cmp\(section, "(\w+)', source))
    assert keys and sections
    for key in keys:
        assert re.search(rf"^\s+{key} = ", text, re.M), f"key {key} is not in shunt.conf(5)"
    for section in sections:
        assert f"[{section}" in text, f"section [{section}] is not in shunt.conf(5)"
