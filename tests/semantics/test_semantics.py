# SPDX-License-Identifier: MIT
"""Differential semantic tests: the kernel is the oracle. Each t_<topic>
program runs twice plain (its trace must be deterministic) and once under
`shunt run`; stdout and exit status must be identical, and the SHUNT_STATS
counters must meet the program's `// shunt-expect:` line, which proves the
shared-memory path was taken (or, where that is the point, was not).

    python3 -m pytest tests/semantics            # everything
    python3 -m pytest tests/semantics -m plain   # only the kernel half
"""

import difflib
import os
import pathlib
import re
import shutil

import pytest

HERE = pathlib.Path(__file__).resolve().parent
HELPERS = {"t_harness"}  # t_harness.c is the shared helper library, not a test
PROGRAMS = sorted(p.stem for p in HERE.glob("t_*.c") if p.stem not in HELPERS)
DEFAULT_TIMEOUT = 60
SKIP = 77

EXPECT_RE = re.compile(r"^//\s*shunt-expect:(.*)$", re.M)
# counter OP value; value is a number with an optional K/M/G suffix, or
# ${ENV_VAR:-number} for sizes an environment variable overrides.
NUM = r"\d+[KMG]?"
TERM_RE = re.compile(r"^([a-z_][a-z0-9_]*)(==|!=|>=|<=|>|<)"
                     rf"(?:({NUM})|\$\{{([A-Z_][A-Z0-9_]*):-({NUM})\}})$")
TIMEOUT_RE = re.compile(r"^//\s*t-timeout:\s*(\d+)\s*$", re.M)
# `// shunt-needs: companions`: the shunt half needs a daemon that can make
# companion kernel sockets (CAP_NET_ADMIN): ports held by accepted
# connections, connections moved onto the kernel (docs/differences.md).
NEEDS_RE = re.compile(r"^//\s*shunt-needs:\s*(.*)$", re.M)
OPS = {
    "==": lambda a, b: a == b, "!=": lambda a, b: a != b,
    ">=": lambda a, b: a >= b, "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b, "<": lambda a, b: a < b,
}

# What the strace check traces: every syscall that can move socket data.
TRACED = ("read", "write", "readv", "writev", "sendto", "recvfrom", "sendmsg",
          "recvmsg", "sendmmsg", "recvmmsg")
STRACE_PROGRAM = "t_strace_xfer"


def source(name):
    return (HERE / f"{name}.c").read_text(encoding="utf-8")


def size(text):
    """Parse 123, 8M or 2G (K/M/G are powers of 1024), as t_env_u64 does."""
    m = re.fullmatch(r"\s*(\d+)\s*([kKmMgG]?)\s*", text)
    if not m:
        raise ValueError(f"not a size: {text!r}")
    return int(m.group(1)) << {"": 0, "k": 10, "m": 20, "g": 30}[m.group(2).lower()]


def expectations(name):
    """[(counter, op, value)] from the program's `// shunt-expect:` lines."""
    terms = []
    for line in EXPECT_RE.findall(source(name)):
        for term in line.split():
            m = TERM_RE.match(term)
            if not m:
                raise ValueError(f"{name}.c: bad shunt-expect term {term!r}")
            value = m.group(3) or os.environ.get(m.group(4)) or m.group(5)
            terms.append((m.group(1), m.group(2), size(value)))
    return terms


def needs(name):
    return {w for line in NEEDS_RE.findall(source(name)) for w in line.split()}


def daemon_lacks(wanted):
    """What of `wanted` the session's daemon cannot do: it runs as the test
    run's user, and only root's has CAP_NET_ADMIN for companions."""
    return sorted(w for w in wanted if w == "companions" and os.geteuid() != 0)


def timeout_of(name):
    m = TIMEOUT_RE.search(source(name))
    return int(m.group(1)) if m else DEFAULT_TIMEOUT


def program_path(build_dir, name):
    path = build_dir / "tests" / "semantics" / name
    if not os.access(path, os.X_OK):
        pytest.fail(f"{path} is not built: run `meson setup build && ninja -C build` "
                    "(or set SHUNT_BUILD_DIR)", pytrace=False)
    return path


def diff(a, b, a_name, b_name):
    return "".join(difflib.unified_diff(
        a.decode(errors="replace").splitlines(True),
        b.decode(errors="replace").splitlines(True), a_name, b_name))


@pytest.fixture(scope="session")
def plain_results():
    """name -> first plain Result, so the shunt half need not rerun it."""
    return {}


def run_plain(tools, build_dir, name, cwd):
    return tools.run([program_path(build_dir, name)], tools.plain_env(),
                     timeout_of(name), cwd=cwd)


def check_plain_ok(res, name):
    if res.timed_out or res.rc not in (0, SKIP):
        pytest.fail(f"{name} fails without shunt: the kernel disagrees with the "
                    "program, fix the program first\n" + res.describe(), pytrace=False)


@pytest.mark.plain
def test_every_program_declares_expectations():
    missing = [n for n in PROGRAMS if not expectations(n)]
    assert not missing, f"no `// shunt-expect:` line in: {', '.join(missing)}"
    listed = (HERE / "meson.build").read_text(encoding="utf-8")
    unbuilt = [n for n in PROGRAMS if f"'{n}'" not in listed]
    assert not unbuilt, f"not listed in tests/semantics/meson.build: {', '.join(unbuilt)}"


@pytest.mark.plain
@pytest.mark.parametrize("name", PROGRAMS)
def test_plain(name, tools, build_dir, plain_results, tmp_path):
    """Twice without shunt: both runs pass and print the same trace."""
    first = run_plain(tools, build_dir, name, tmp_path)
    plain_results[name] = first
    check_plain_ok(first, name)
    second = run_plain(tools, build_dir, name, tmp_path)
    check_plain_ok(second, name)
    if (first.rc, first.stdout) != (second.rc, second.stdout):
        pytest.fail(f"{name}: two plain runs differ, the trace is not deterministic:\n"
                    + diff(first.stdout, second.stdout, "plain #1", "plain #2"),
                    pytrace=False)
    if first.rc == SKIP:
        pytest.skip(first.stderr.decode(errors="replace").strip() or "program skipped")


def check_stats(tools, name, stats_path, terms):
    try:
        lines, total = tools.read_stats(stats_path)
    except ValueError as e:
        pytest.fail(f"{name}: unreadable SHUNT_STATS: {e}", pytrace=False)
    if not lines:
        pytest.fail(f"{name}: no line in SHUNT_STATS ({stats_path}): the library was "
                    "not loaded or did not report, so nothing proves the run used shunt",
                    pytrace=False)
    failed = [f"{k}{op}{v} (got {total.get(k, 0)})" for k, op, v in terms
              if not OPS[op](total.get(k, 0), v)]
    if failed:
        pytest.fail(f"{name}: shunt-expect not met: {', '.join(failed)}; summed stats "
                    f"{total} from {len(lines)} process(es)", pytrace=False)


@pytest.mark.shunt
@pytest.mark.parametrize("name", PROGRAMS)
def test_shunt(name, tools, build_dir, shunt_cli, shunt_session, plain_results, tmp_path):
    """Under `shunt run`: same stdout and exit status as plain, and the
    program's shunt-expect counters are met."""
    cli = shunt_cli()
    terms = expectations(name)
    assert terms, f"{name}.c has no `// shunt-expect:` line"
    lacking = daemon_lacks(needs(name))
    if lacking:
        pytest.skip(f"{name} needs {', '.join(lacking)}: shuntd runs unprivileged here, "
                    "without CAP_NET_ADMIN")
    plain = plain_results.get(name) or run_plain(tools, build_dir, name, tmp_path)
    check_plain_ok(plain, name)
    stats = shunt_session.new_stats_path(name)
    res = tools.run([cli, "run", "--", program_path(build_dir, name)],
                    shunt_session.env(stats), timeout_of(name) + 30, cwd=tmp_path)
    if res.timed_out:
        pytest.fail(f"{name} hung under shunt:\n" + res.describe(), pytrace=False)
    if (res.rc, res.stdout) != (plain.rc, plain.stdout):
        pytest.fail(f"{name}: under shunt {res.status} (plain {plain.status}); trace diff:\n"
                    + diff(plain.stdout, res.stdout, "plain", "shunt")
                    + "\n--- stderr under shunt (tail) ---\n"
                    + res.stderr.decode(errors="replace")[-4000:], pytrace=False)
    if plain.rc == SKIP:
        pytest.skip(plain.stderr.decode(errors="replace").strip() or "program skipped")
    check_stats(tools, name, stats, terms)


# ---- strace: under shunt, no read/write-family syscall touches the sockets

LINE_RE = re.compile(r"^(\d+)(?:<[^>]*>)?\s+([a-z0-9_]+)\((-?\d+)(<[^>]*>)?")


def strace_cmd(log, argv):
    return ["strace", "-f", "-qq", "-Y", "-yy", "-e", "trace=" + ",".join(TRACED),
            "-o", log] + argv


def socket_calls(log_path, fd_file):
    """Traced calls between the program's BEGIN and END markers, made by one
    of its threads, on one of its data socket fds or on any TCP socket."""
    fds, tids = set(), set()
    for line in pathlib.Path(fd_file).read_text().splitlines():
        key, *vals = line.split()
        (fds if key == "fds" else tids).update(int(v) for v in vals)
    assert fds and tids, f"{fd_file} lacks fds or tids"
    hits, inside, seen_begin, seen_end = [], False, False, False
    for line in pathlib.Path(log_path).read_text(errors="replace").splitlines():
        if '"SHUNT-T-BEGIN"' in line:
            inside = seen_begin = True
            continue
        if '"SHUNT-T-END"' in line:
            inside, seen_end = False, True
            continue
        m = LINE_RE.match(line)
        if not inside or not m or int(m.group(1)) not in tids:
            continue
        fd, decoded = int(m.group(3)), m.group(4) or ""
        if m.group(2) in TRACED and (fd in fds or decoded.startswith("<TCP")):
            hits.append(line[:200])
    assert seen_begin and seen_end, f"markers missing from {log_path}"
    return hits


def untraceable_leak_check(env):
    """LeakSanitizer cannot run under ptrace: switch it off in sanitizer builds."""
    opts = env.get("ASAN_OPTIONS")
    env["ASAN_OPTIONS"] = (opts + ":" if opts else "") + "detect_leaks=0"
    return env


def need_strace():
    if not shutil.which("strace"):
        pytest.skip("strace is not installed (apt-get install strace)")


@pytest.mark.plain
def test_strace_checker_sees_kernel_io(tools, build_dir, tmp_path):
    """Without shunt the same check must find the kernel's socket calls:
    otherwise the shunt-side check below could not fail."""
    need_strace()
    log, fd_file = tmp_path / "strace.log", tmp_path / "fds"
    env = untraceable_leak_check(tools.plain_env())
    env["T_FD_FILE"] = str(fd_file)
    res = tools.run(strace_cmd(log, [program_path(build_dir, STRACE_PROGRAM)]),
                    env, 120, cwd=tmp_path)
    if res.rc != 0:
        pytest.fail("strace of the plain program failed:\n" + res.describe(), pytrace=False)
    hits = socket_calls(log, fd_file)
    if len(hits) < 100:
        pytest.fail(f"only {len(hits)} kernel socket calls seen in {log} without shunt: "
                    "the checker is blind\n" + "\n".join(hits), pytrace=False)


@pytest.mark.shunt
def test_strace_no_socket_syscalls(tools, build_dir, shunt_cli, shunt_session, tmp_path):
    """Under shunt the transfer happens in shared memory: no traced call on
    the data sockets between the markers."""
    cli = shunt_cli()
    need_strace()
    prog = program_path(build_dir, STRACE_PROGRAM)
    # Start the session daemon outside strace (strace -f waits for every
    # traced process, and a daemon is long-lived).
    warm = tools.run([cli, "run", "--", "/bin/true"], shunt_session.env(),
                     60, cwd=tmp_path)
    if warm.rc != 0:
        pytest.fail("shunt run -- /bin/true failed:\n" + warm.describe(), pytrace=False)
    log, fd_file = tmp_path / "strace.log", tmp_path / "fds"
    stats = shunt_session.new_stats_path(STRACE_PROGRAM + ".strace")
    env = untraceable_leak_check(shunt_session.env(stats))
    env["T_FD_FILE"] = str(fd_file)
    res = tools.run(strace_cmd(log, [cli, "run", "--", prog]), env, 180,
                    cwd=tmp_path)
    if res.rc != 0:
        pytest.fail("strace shunt run failed:\n" + res.describe(), pytrace=False)
    check_stats(tools, STRACE_PROGRAM, stats, expectations(STRACE_PROGRAM))
    hits = socket_calls(log, fd_file)
    if hits:
        pytest.fail(f"{len(hits)} traced syscalls on the data sockets under shunt "
                    f"(log {log}); first ones:\n" + "\n".join(hits[:20]), pytrace=False)
