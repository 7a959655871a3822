# SPDX-License-Identifier: MIT
"""The Debian package, as CI checks it: built with `dpkg-buildpackage -us -uc
-b` from a clean copy of this tree, lintian clean of errors, and then
installed, used, upgraded and purged in a guest that boots systemd
(tests/package/guest: Debian's kernel under QEMU, this host's root shared
read-only under a tmpfs overlay). The guest test skips, saying what is
missing, where QEMU or the guest kernel cannot be had; it takes about a
minute under TCG."""

import os
import pathlib
import shutil
import subprocess
import time

import pytest

GUEST_TIMEOUT = 150


def _tree_files(repo):
    """The files of the tree as a clean checkout has them: tracked files and
    new ones not ignored (so a change not yet committed is built too)."""
    res = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=repo,
                         capture_output=True, timeout=60)
    if res.returncode == 0:
        return [f for f in res.stdout.decode().split("\0") if f and (repo / f).is_file()]
    out = []
    for path in repo.rglob("*"):
        rel = path.relative_to(repo)
        if path.is_file() and not rel.parts[0].startswith(("build", ".git")):
            out.append(str(rel))
    return out


@pytest.fixture(scope="module")
def package(repo_root, tmp_path_factory):
    if os.environ.get("SHUNT_BUILD_DIR"):
        pytest.skip("the package is built and tested once, in the pass on the ordinary build")
    for tool, pkg in (("dpkg-buildpackage", "dpkg-dev"), ("dh", "debhelper"),
                      ("scdoc", "scdoc")):
        if not shutil.which(tool):
            pytest.skip(f"building the package needs {tool} ({pkg}; scripts/setup installs it)")
    work = tmp_path_factory.mktemp("deb")
    src = work / "shunt"
    for rel in _tree_files(repo_root):
        dst = src / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(repo_root / rel, dst)
    start = time.monotonic()
    res = subprocess.run(["dpkg-buildpackage", "-us", "-uc", "-b"], cwd=src,
                         stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=900)
    seconds = time.monotonic() - start
    assert res.returncode == 0, f"dpkg-buildpackage failed:\n{(res.stdout + res.stderr)[-6000:]}"
    debs = [p for p in work.glob("shunt_*.deb")]
    assert len(debs) == 1, list(work.iterdir())
    (work / "build-seconds").write_text(f"{seconds:.1f}\n")
    print(f"package built in {seconds:.1f} s: {debs[0].name}")
    return debs[0]


def test_lintian_finds_no_error(package):
    if not shutil.which("lintian"):
        pytest.skip("lintian is not installed (scripts/setup installs it)")
    changes = next(package.parent.glob("shunt_*.changes"))
    res = subprocess.run(["lintian", str(changes)], capture_output=True, text=True, timeout=300)
    errors = [line for line in res.stdout.splitlines() if line.startswith("E:")]
    assert not errors, res.stdout


def test_package_puts_everything_where_debian_expects_it(package):
    res = subprocess.run(["dpkg-deb", "-c", str(package)], capture_output=True, text=True,
                         check=True, timeout=60)
    paths = {line.split()[5].lstrip(".") for line in res.stdout.splitlines()}
    triplet = subprocess.run(["dpkg-architecture", "-qDEB_HOST_MULTIARCH"], capture_output=True,
                             text=True, check=True).stdout.strip()
    expected = {
        "/usr/bin/shunt", "/usr/sbin/shuntd", f"/usr/lib/{triplet}/shunt/libshunt.so",
        "/etc/shunt/shuntd.conf", "/lib/systemd/system/shuntd.service",
        "/lib/systemd/system/shuntd.socket", "/usr/share/man/man1/shunt.1.gz",
        "/usr/share/man/man8/shuntd.8.gz", "/usr/share/man/man5/shunt.conf.5.gz",
        "/usr/share/man/man7/libshunt.7.gz", "/usr/share/bash-completion/completions/shunt",
        "/usr/share/doc/shunt/copyright", "/usr/share/doc/shunt/README.md.gz",
        "/usr/share/shunt/compare-plot.py",
    }
    assert expected <= paths, sorted(expected - paths)
    # The library is preloaded, never linked: nothing of it on the linker's path.
    assert not [p for p in paths if p.startswith(f"/usr/lib/{triplet}/libshunt")], paths
    info = subprocess.run(["dpkg-deb", "-f", str(package), "Depends", "Conffiles"],
                          capture_output=True, text=True, check=True).stdout
    assert "libinih1" in info and "libmnl0" in info, info


def _guest_visible(build):
    """Where to put what the guest must read: @build, unless it is under
    /tmp or /var/tmp, which the guest mounts fresh (tests/package/guest/init),
    as in a checkout under /tmp; then root's cache directory."""
    real = build.resolve()
    if any(real.is_relative_to(t) for t in (pathlib.Path("/tmp"), pathlib.Path("/var/tmp"))):
        return pathlib.Path.home() / ".cache" / "shunt-guest-test"
    return build


def _guest_missing(repo_root):
    for tool, pkg in (("qemu-system-x86_64", "qemu-system-x86"), ("cpio", "cpio"),
                      ("busybox", "busybox-static"), ("depmod", "kmod")):
        if not shutil.which(tool):
            return f"{tool} is missing ({pkg}; scripts/setup installs it)"
    if os.geteuid() != 0:
        return "not root (the guest's 9p export of / must read every file)"
    res = subprocess.run([str(repo_root / "scripts" / "guest-kernel")], capture_output=True,
                         text=True, timeout=300)
    if res.returncode != 0:
        return f"no guest kernel: scripts/guest-kernel failed: {res.stderr.strip()[-500:]}"
    return None


def test_service_in_a_guest_with_systemd(package, repo_root):
    """Boot systemd in a guest, then (tests/package/guest/guest-test.sh): dpkg
    -i, the socket and the notify service come up with only their
    capabilities, redis under `shunt run` uses shared memory through the
    service's daemon, reload keeps the daemon, SIGKILL restarts it, an
    upgrade restarts it, and a purge leaves nothing behind."""
    why = _guest_missing(repo_root)
    if why:
        pytest.skip(f"SKIPPED LOUDLY: cannot boot the guest for the package test: {why}")
    guest = repo_root / "build-guest"
    run = _guest_visible(guest) / f"run-{os.getpid()}"
    shutil.rmtree(run, ignore_errors=True)
    run.mkdir(parents=True)
    try:
        deb = run / package.name
        shutil.copy2(package, deb)
        unpacked = run / "up"
        subprocess.run(["dpkg-deb", "-R", str(package), str(unpacked)], check=True, timeout=60)
        control = unpacked / "DEBIAN" / "control"
        text = control.read_text()
        version = next(l.split(": ", 1)[1] for l in text.splitlines() if l.startswith("Version:"))
        control.write_text(text.replace(f"Version: {version}", f"Version: {version}+upgradetest"))
        deb_up = run / "shunt_upgrade.deb"
        subprocess.run(["dpkg-deb", "-b", str(unpacked), str(deb_up)], check=True,
                       capture_output=True, timeout=120)
        script = run / "guest-test.sh"
        shutil.copy2(repo_root / "tests" / "package" / "guest" / "guest-test.sh", script)
        unit = run / "shunt-guest-test.service"
        unit.write_text(f"""[Unit]
Description=shunt package test
After=basic.target
SuccessAction=poweroff-force
FailureAction=poweroff-force
[Service]
Type=oneshot
TimeoutStartSec=infinity
StandardOutput=journal+console
StandardError=inherit
ExecStart=/bin/sh -c '/bin/sh {script} {deb} {deb_up}; echo "GUEST-RESULT rc=$$?"'
""")
        argv = ["qemu-system-x86_64", "-accel", "tcg,thread=multi,tb-size=256", "-cpu", "max",
                "-smp", "2", "-m", "1024", "-M", "q35", "-kernel", str(guest / "vmlinux"),
                "-initrd", str(guest / "initramfs.cpio.gz"), "-nographic", "-no-reboot",
                "-nodefaults", "-serial", "stdio",
                "-virtfs", "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,"
                           "multidevs=remap,id=hostroot",
                "-append", "console=ttyS0 quiet loglevel=3 panic=-1 systemd.show_status=0 "
                           f"systemd.unit=shunt-guest.target shunt.guest_unit={unit}"]
        start = time.monotonic()
        try:
            res = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True,
                                 timeout=GUEST_TIMEOUT)
            console = res.stdout.decode(errors="replace")
        except subprocess.TimeoutExpired as e:
            console = (e.stdout or b"").decode(errors="replace")
            pytest.fail(f"the guest did not finish in {GUEST_TIMEOUT} s:\n{console[-5000:]}")
        seconds = time.monotonic() - start
        print(f"guest ran for {seconds:.1f} s")
        lines = [l for l in console.splitlines()
                 if "ok:" in l or "FAIL:" in l or "GUEST-RESULT" in l or "guest" in l]
        failed = [l for l in lines if "FAIL:" in l]
        assert "GUEST-RESULT rc=0" in console and not failed, \
            "\n".join(lines) + "\n--- console (tail) ---\n" + console[-4000:]
        # Every step the guest script takes was checked, not skipped.
        assert sum("ok:" in l for l in lines) >= 25, "\n".join(lines)
    finally:
        shutil.rmtree(run, ignore_errors=True)
