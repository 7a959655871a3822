# SPDX-License-Identifier: MIT
"""`meson install`: everything where a distribution expects it, a `shunt
run` from the installed tree that finds its library and daemon relative to
itself (the tree moved as a whole), units that `systemd-analyze verify`
accepts, and a default policy that says what the built-in one does."""

import json
import os
import shutil
import subprocess

import pytest


@pytest.fixture(scope="module")
def installed(build_dir, tmp_path_factory):
    """The build installed into a staging directory, then moved elsewhere."""
    dest = tmp_path_factory.mktemp("destdir")
    res = subprocess.run(["meson", "install", "-C", str(build_dir), "--destdir", str(dest),
                          "--quiet", "--no-rebuild"], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    options = subprocess.run(["meson", "introspect", "--buildoptions", str(build_dir)],
                             capture_output=True, text=True, check=True).stdout
    opts = {o["name"]: o["value"] for o in json.loads(options)}
    root = dest / opts["prefix"].lstrip("/")
    moved = tmp_path_factory.mktemp("moved") / "shunt"
    shutil.copytree(root, moved, symlinks=True)
    return dict(opts=opts, root=root, moved=moved, dest=dest)


def test_layout(installed):
    o, root = installed["opts"], installed["root"]
    for rel in ("bin/shunt", "sbin/shuntd", f"{o['libdir']}/shunt/libshunt.so",
                "share/bash-completion/completions/shunt", "share/doc/shunt/README.md",
                "share/shunt/compare-plot.py"):
        assert (root / rel).exists(), rel
    etc = installed["dest"] / o["sysconfdir"].lstrip("/") if o["sysconfdir"].startswith("/") \
        else root / o["sysconfdir"]
    assert (etc / "shunt" / "shuntd.conf").exists()
    assert list(installed["dest"].rglob("shuntd.service")), "no shuntd.service installed"
    assert list(installed["dest"].rglob("shuntd.socket")), "no shuntd.socket installed"


def test_moved_tree_finds_its_library_and_daemon(installed, tmp_path):
    moved = installed["moved"]
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD" and not k.startswith("SHUNT_")}
    env["SHUNT_SOCKET"] = str(tmp_path / "none.sock")
    res = subprocess.run([str(moved / "bin" / "shunt"), "run", "--no-daemon", "--", "sh", "-c",
                          "echo \"$LD_PRELOAD\""], capture_output=True, text=True, env=env,
                         timeout=30)
    lib = f"{moved}/{installed['opts']['libdir']}/shunt/libshunt.so"
    assert res.returncode == 0 and res.stdout.strip() == lib, res.stdout + res.stderr
    res = subprocess.run([str(moved / "bin" / "shunt"), "daemon", "--help"], capture_output=True,
                         text=True, env=env, timeout=30)
    assert res.returncode == 0 and res.stdout.startswith("usage: shuntd"), res.stderr


def test_units_verify(installed, tmp_path):
    """systemd-analyze verify, with ExecStart pointing at the staged shuntd
    (verify insists the executable exists) and the staged manual pages
    (it checks Documentation=)."""
    if not shutil.which("systemd-analyze"):
        pytest.skip("systemd-analyze is missing (package systemd)")
    dest, o = installed["dest"], installed["opts"]
    staged = [p for p in dest.rglob("shuntd.s*") if p.suffix in (".service", ".socket")]
    assert len(staged) == 2, staged
    for unit in staged:
        text = unit.read_text().replace(f"ExecStart={o['prefix']}/",
                                        f"ExecStart={installed['root']}/")
        (tmp_path / unit.name).write_text(text)
    service = (tmp_path / "shuntd.service").read_text()
    socket = (tmp_path / "shuntd.socket").read_text()
    assert "Type=notify" in service and "ExecReload=/bin/kill -HUP $MAINPID" in service
    assert "Restart=on-failure" in service and "RuntimeDirectory=shunt" in service
    assert "ListenSequentialPacket=/run/shunt/shuntd.sock" in socket
    assert "--socket /run/shunt/shuntd.sock" in service
    env = dict(os.environ, MANPATH=str(installed["root"] / "share" / "man"))
    res = subprocess.run(["systemd-analyze", "verify", str(tmp_path / "shuntd.socket"),
                          str(tmp_path / "shuntd.service")], capture_output=True, text=True,
                         env=env, timeout=120)
    assert res.returncode == 0 and res.stderr.strip() == "", res.stderr


def test_default_policy_is_the_built_in_one(installed, shunt_cli, repo_root):
    conf = repo_root / "packaging" / "shuntd.conf"
    out = []
    for src, dst in (("uid:0", "127.0.0.1"), ("uid:1000", "uid:0@127.0.0.1")):
        res = subprocess.run([str(shunt_cli()), "policy", "check", "--config", str(conf), src, dst,
                              "80"], capture_output=True, text=True, timeout=30)
        assert res.returncode == 0, res.stderr
        out.append(res.stdout.splitlines()[-1])
    assert out[0].startswith("=> allow") and out[1].startswith("=> kernel"), out
