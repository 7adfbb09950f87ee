"""The agent as a package of its own (issue 21, item 1).

* The committed wire code (client-agent/src/edgepath_agent/wire) is what
  proto/generate.py produces from proto/ with the pinned grpcio-tools.
* The device runtime (``--help``, ``--version``, ``run``, ``status``) imports none
  of the replay extra's modules (numpy, pandas, scipy, matplotlib, tqdm).
* A wheel built from the files a clean clone has (``git ls-files``: ignored and
  generated-at-setup files are left out) installs into a fresh venv, without the
  extras, and its ``edgepath-agent`` answers ``--help``, ``--version`` and a dry run.
  Dependencies (at requirements.txt's pins, as constraints) come from the wheel directory /
  ``PIP_FIND_LINKS`` when they are all there, else from the package index with pip's own
  cache (CI has the index). The
  installed size is printed as an ``AGENT_INSTALL {...}`` line (``-s`` shows it).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
AGENT = ROOT / "client-agent"
WIRE = AGENT / "src" / "edgepath_agent" / "wire"
HEAVY = ("numpy", "pandas", "scipy", "matplotlib", "tqdm")


def _generate_module():
    spec = importlib.util.spec_from_file_location("edgepath_proto_generate", ROOT / "proto" / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_wire_code_matches_proto(tmp_path: Path) -> None:
    pytest.importorskip("grpc_tools", reason="grpcio-tools (requirements.txt) regenerates the wire code")
    produced = _generate_module().generate(tmp_path / "wire")
    names = [*sorted(p.name for p in produced), "__init__.py"]
    committed = sorted(p.name for p in WIRE.iterdir() if p.is_file())
    assert sorted(names) == committed, "wire/ holds files proto/generate.py does not produce"
    stale = [n for n in names if (tmp_path / "wire" / n).read_bytes() != (WIRE / n).read_bytes()]
    assert not stale, f"wire code out of date with proto/: {stale}; run `python proto/generate.py` and commit"


def test_wire_code_is_tracked_by_git() -> None:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    out = subprocess.run(
        ["git", "ls-files", "client-agent/src/edgepath_agent/wire"], cwd=ROOT, capture_output=True, text=True
    )
    if out.returncode != 0:
        pytest.skip(f"git ls-files failed: {out.stderr.strip()}")
    tracked = {Path(p).name for p in out.stdout.split()}
    assert {"__init__.py", "edgepath_pb2.py", "edgepath_pb2_grpc.py", "edgepath_pb2.pyi"} <= tracked


RUNTIME_PROBE = """
import json, sys
from typer.testing import CliRunner
from edgepath_agent.cli import app
runner = CliRunner()
results = {}
ARGVS = (["--help"], ["--version"], ["run", "--help"], ["status", "--help"], ["status", "--status-file", sys.argv[1]])
for argv in ARGVS:
    r = runner.invoke(app, argv)
    results[" ".join(argv)] = [r.exit_code, r.output]
import edgepath_agent.daemon, edgepath_agent.client, edgepath_agent.collector, edgepath_agent.applier
heavy = sorted(m for m in sys.modules if m.split(".")[0] in {HEAVY!r})
print(json.dumps({{"results": results, "heavy": heavy}}))
"""


def test_runtime_imports_no_replay_dependencies(tmp_path: Path) -> None:
    code = RUNTIME_PROBE.replace("{HEAVY!r}", repr(set(HEAVY))).replace("{{", "{").replace("}}", "}")
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "absent.json")], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout.strip().splitlines()[-1])
    assert data["heavy"] == [], f"the runtime imported {data['heavy']}"
    results = data["results"]
    assert results["--help"][0] == 0 and "run" in results["--help"][1]
    assert results["--version"][0] == 0 and results["--version"][1].startswith("edgepath-agent ")
    assert results["status --status-file " + str(tmp_path / "absent.json")][0] == 1  # no agent running: exit 1


@pytest.fixture
def without_replay_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """The agent's CLI as installed without the replay extra: importing ``edgepath_agent.replay`` fails on pandas."""
    from edgepath_agent import cli

    real = cli.importlib.import_module

    def no_pandas(name: str):
        if name == "edgepath_agent.replay":
            raise ModuleNotFoundError("No module named 'pandas'", name="pandas")
        return real(name)

    monkeypatch.setattr(cli.importlib, "import_module", no_pandas)


@pytest.mark.usefixtures("without_replay_extra")
def test_replay_without_extra_names_the_extra() -> None:
    import typer
    from edgepath_agent import cli

    with pytest.raises(typer.Exit) as info:
        cli.require_extra("edgepath_agent.replay", "replay")
    assert info.value.exit_code == 2


@pytest.mark.usefixtures("without_replay_extra")
def test_replay_names_the_missing_extra_before_any_missing_option() -> None:
    """``edgepath-agent replay`` without the extra: exit 2 naming the extra at once, not ``--service`` missing,
    then ``--report``, then the extra; ``--help`` still prints the options."""
    from edgepath_agent import cli
    from typer.testing import CliRunner

    result = CliRunner().invoke(cli.app, ["replay"], env={"COLUMNS": "200"})
    assert result.exit_code == 2
    assert "pip install './client-agent[replay]'" in result.output and "pandas is not installed" in result.output
    assert "Missing option" not in result.output
    helped = CliRunner().invoke(cli.app, ["replay", "--help"], env={"COLUMNS": "200"})
    assert helped.exit_code == 0 and "--service" in helped.output


# --- the wheel, built from a clean clone's files, in a fresh venv --------------------------------------------


def clean_clone_files(dest: Path) -> Path:
    """Copy what a clean clone of client-agent/ holds (tracked + untracked-not-ignored files) to ``dest``."""
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "client-agent"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if out.returncode != 0:
        pytest.skip(f"git ls-files failed: {out.stderr.strip()}")
    for rel in out.stdout.split("\n"):
        if rel and (ROOT / rel).is_file():
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, target)
    return dest / "client-agent"


def build_wheel(src: Path, out: Path) -> Path:
    """``pip wheel`` of ``src``; without build isolation when this interpreter has setuptools ≥ 77."""
    argv = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(src)]
    try:
        import setuptools

        if int(setuptools.__version__.split(".")[0]) >= 77:
            argv.insert(4, "--no-build-isolation")
    except ImportError:
        pass
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (wheel,) = out.glob("edgepath_agent-*.whl")
    return wheel


def test_wheel_and_sdist_carry_the_license(tmp_path: Path) -> None:
    """The Apache-2.0 text travels with both distributions (``License-File``, PEP 639). Its paths cannot leave
    client-agent/, so client-agent/LICENSE is a copy of the repository's, which must not drift from it."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout to know what a clean clone holds")
    text = (ROOT / "LICENSE").read_bytes()
    src = clean_clone_files(tmp_path / "clone")
    wheel = build_wheel(src, tmp_path / "dist")
    info = wheel.name.split("-py3")[0] + ".dist-info"
    with zipfile.ZipFile(wheel) as whl:
        assert whl.read(f"{info}/licenses/LICENSE") == text, whl.namelist()
        assert "License-File: LICENSE" in whl.read(f"{info}/METADATA").decode().splitlines()
    sdist_argv = [
        sys.executable,
        "-c",
        "import sys; from setuptools import build_meta as b; print(b.build_sdist(sys.argv[1]))",
    ]
    proc = subprocess.run([*sdist_argv, str(tmp_path / "sdist")], cwd=src, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    name = proc.stdout.split()[-1]
    with tarfile.open(tmp_path / "sdist" / name) as sdist:
        member = sdist.extractfile(f"{name.removesuffix('.tar.gz')}/LICENSE")
        assert member is not None and member.read() == text
    assert (AGENT / "LICENSE").read_bytes() == text, "client-agent/LICENSE differs from LICENSE: copy it again"


def install_into_fresh_venv(wheel: Path, venv: Path) -> str:
    """Fresh venv + the wheel (no extras), dependencies at requirements.txt's pins. Returns where they came from."""
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    constraints = venv.parent / "constraints.txt"  # pins as constraints (extras markers stripped, as docker/ does)
    pins = [re.sub(r"\[[^]]*\]", "", line) for line in (ROOT / "requirements.txt").read_text().splitlines()]
    constraints.write_text("\n".join(pins) + "\n")
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "-c", str(constraints)]
    offline = subprocess.run(
        [*pip, "--no-index", "--find-links", str(wheel.parent), str(wheel)], capture_output=True, text=True, timeout=300
    )
    if offline.returncode == 0:
        return "offline (find-links)"
    online = subprocess.run([*pip, str(wheel)], capture_output=True, text=True, timeout=900)
    if online.returncode != 0:
        text = online.stdout + online.stderr
        if any(s in text for s in ("NewConnectionError", "Temporary failure in name resolution", "Network is unre")):
            pytest.skip("package index unreachable and dependencies not in find-links: " + text[-300:])
        raise AssertionError(text)
    return "package index"


def site_packages(venv: Path) -> Path:
    (sp,) = (venv / "lib").glob("python3*/site-packages")
    return sp


def tree_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


@pytest.mark.slow
@pytest.mark.timeout(1200)  # a cold pip cache downloads grpcio, pydantic-core and friends from the index
def test_wheel_from_clean_clone_installs_alone_and_runs(tmp_path: Path) -> None:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout to know what a clean clone holds")
    src = clean_clone_files(tmp_path / "clone")
    wheel = build_wheel(src, tmp_path / "dist")
    venv = tmp_path / "venv"
    how = install_into_fresh_venv(wheel, venv)
    sp = site_packages(venv)
    baseline = {"pip", "setuptools", "_distutils_hack", "pkg_resources"}
    before = sum(
        tree_bytes(p) if p.is_dir() else p.stat().st_size
        for p in sp.iterdir()
        if p.name.split("-")[0].lower() in baseline
    )
    installed = tree_bytes(sp) - before
    agent_only = tree_bytes(sp / "edgepath_agent")
    exe = venv / "bin" / "edgepath-agent"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["COLUMNS"] = "200"

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(exe), *argv], capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)

    help_ = run("--help")
    assert help_.returncode == 0, help_.stderr
    assert "run" in help_.stdout and "status" in help_.stdout
    version = run("--version")
    assert version.returncode == 0 and version.stdout.strip() == "edgepath-agent 0.1.0", version.stdout + version.stderr
    heavy = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            f"import importlib.util; print([m for m in {HEAVY!r} if importlib.util.find_spec(m)])",
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert heavy.stdout.strip() == "[]", f"installed without extras, yet present: {heavy.stdout}"
    replay = run("replay", "--wifi", str(wheel), "--cellular", str(wheel), "--service", "grpc://127.0.0.1:1",
                 "--report", "r.json", "--plot", "p.png")  # fmt: skip
    assert replay.returncode == 2 and "pip install './client-agent[replay]'" in replay.stderr, (
        replay.stdout + replay.stderr
    )

    dry = dry_run(run, tmp_path)
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert "stopped after 1 step(s)" in dry.stdout
    print(
        "AGENT_INSTALL "
        + json.dumps(
            {
                "wheel_bytes": wheel.stat().st_size,
                "installed_bytes_without_extras": installed,
                "installed_mib_without_extras": round(installed / 2**20, 1),
                "edgepath_agent_bytes": agent_only,
                "distributions": sorted(p.name for p in sp.glob("*.dist-info")),
                "dependencies_from": how,
            }
        )
    )


def dry_run(run, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """``run --dry-run --steps 1``: against a real service and a netns device when root, else degraded.

    With root and kernel MPTCP the installed agent reads a throw-away device namespace
    (wlan0/wwan0 with default routes) and a real service on loopback, and must print the
    route changes without making them. Otherwise it manages ``lo`` against the real service
    (``--steps`` exits 69 when no step got an answer) and must stop cleanly.
    """
    from edgepath_agent.testbed.netns import Testbed, netns_supported
    from service_harness import running_service

    if netns_supported() is not None:
        with running_service() as svc:
            config = str(write_toml(tmp_path, attempts=2, timeout_s=5.0))
            return run("run", "--dry-run", "--steps", "1", "--interval-s", "0.01", "--service", svc.grpc_url,
                       "--interface", "lo=ETHERNET", "--config", config)  # fmt: skip

    with Testbed() as tb, running_service() as svc:
        before = tb.dev("ip", "-4", "route", "show", "default").stdout
        proc = run("run", "--dry-run", "--steps", "1", "--interval-s", "0.01", "--netns", tb.device_ns,
                   "--service", svc.grpc_url, "--interface", "wlan0=WIFI", "--interface", "wwan0=LTE",
                   "--config", str(write_toml(tmp_path, attempts=2, timeout_s=5.0)))  # fmt: skip
        after = tb.dev("ip", "-4", "route", "show", "default").stdout
        assert f"would run: ip netns exec {tb.device_ns} ip -4 route add default" in proc.stdout, (
            proc.stdout + proc.stderr
        )
        assert before == after, "a dry run changed the routes"
    return proc


def write_toml(tmp_path: Path, **values: object) -> Path:
    path = tmp_path / "agent.toml"
    lines = [f"{k} = {json.dumps(v)}" for k, v in values.items()]
    lines.append(f"status_file = {json.dumps(str(tmp_path / 'status.json'))}")
    path.write_text("\n".join(lines) + "\n")
    return path
