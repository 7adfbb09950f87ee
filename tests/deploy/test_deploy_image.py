"""The container image: Dockerfile lint, and its build steps proven outside Docker.

No Docker engine runs here, so the image's build steps (``docker/build-steps.sh``,
which the Dockerfile's builder stage runs) are run into a temporary prefix from a
copy of exactly the paths the Dockerfile COPYs; the installed tree then serves as
a non-root user with the prefix read-only and only a scratch directory writable
(the image's /tmp emptyDir), and the image's HEALTHCHECK command judges it.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from deploy_helpers import ROOT

DOCKERFILE = ROOT / "Dockerfile"


def _instructions(stage: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of one stage of the Dockerfile, continuation lines joined."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out: list[tuple[str, str]] = []
    current = None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        if word.upper() == "FROM":
            current = rest.split()[-1]
            continue
        if current == stage:
            out.append((word.upper(), rest.strip()))
    return out


def test_dockerfile_passes_hadolint() -> None:
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    proc = subprocess.run([hadolint, str(DOCKERFILE)], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_dockerfile_contract() -> None:
    """Multi-stage, slim Python 3.11, non-root, both ports, health check, build steps from the script."""
    text = DOCKERFILE.read_text()
    # base images are build arguments (pinned by digest with --build-arg for a reproducible build; README "Deploy")
    defaults = dict(re.findall(r"^ARG (\w+)=(\S+)$", text.split("\nFROM ", 1)[0], re.MULTILINE))
    stages = [
        (re.sub(r"\$\{(\w+)\}", lambda m: defaults[m.group(1)], image), name)
        for image, name in re.findall(r"^FROM (\S+) AS (\w+)", text, re.MULTILINE)
    ]
    assert stages == [
        ("rust:1.95-slim-bookworm", "rust"),  # the compiled engines' toolchain, copied into the builder
        ("python:3.11-slim", "builder"),
        ("python:3.11-slim", "runtime"),
    ]
    assert set(defaults) == {"PYTHON_IMAGE", "RUST_IMAGE"}
    runtime = _instructions("runtime")
    user = [a for i, a in runtime if i == "USER"]
    assert user and user[-1].split(":")[0] not in ("0", "root")
    exposed = {p for i, a in runtime if i == "EXPOSE" for p in a.split()}
    assert exposed == {"50051", "8080"}
    assert any(i == "HEALTHCHECK" and "healthcheck.py" in a for i, a in runtime)
    builder_runs = " ".join(a for i, a in _instructions("builder") if i == "RUN")
    assert "docker/build-steps.sh build /opt/edgepath" in builder_runs
    assert "docker/build-steps.sh verify /opt/edgepath" in builder_runs
    # the compiled engines are required in the image (a builder without cargo fails instead of shipping without)
    assert any(i == "ENV" and "REQUIRE_NATIVE=1" in a for i, a in _instructions("builder"))


def test_files_named_by_the_image_sources_exist() -> None:
    """The Dockerfile and docker/ name repository files in their comments (a renamed test left them pointing at
    ``tests/deploy/test_image.py``): each named file exists."""
    named = re.compile(r"\b(?:tests|docker|service|proto|scripts|charts)/[A-Za-z0-9_./-]*\.(?:py|sh|toml|yaml|txt)\b")
    checked = 0
    for source in [DOCKERFILE, *sorted(p for p in (ROOT / "docker").iterdir() if p.is_file())]:
        for rel in named.findall(source.read_text()):
            assert (ROOT / rel).is_file(), f"{source.relative_to(ROOT)} names {rel}, which does not exist"
            checked += 1
    assert checked >= 3


def test_the_image_ships_the_models_the_chart_names() -> None:
    """The builder COPYs models/ and build-steps.sh installs it as /opt/edgepath/models, the chart's model paths."""
    assert any(i == "COPY" and a.split()[0].rstrip("/") == "models" for i, a in _instructions("builder"))
    assert 'cp -r models "$prefix/models"' in (ROOT / "docker" / "build-steps.sh").read_text()
    assert (ROOT / "models" / "primary-path-v2" / "model.pkl").is_file()


def _runtime_env(prefix: Path, scratch: Path) -> dict[str, str]:
    """The runtime stage's ENV, with /opt/edgepath → prefix and /tmp → scratch."""
    env: dict[str, str] = {}
    for instr, args in _instructions("runtime"):
        if instr == "ENV":
            for token in args.split():
                key, _, value = token.partition("=")
                env[key] = value
    for key, value in env.items():
        env[key] = value.replace("/opt/edgepath", str(prefix)).replace("/tmp", str(scratch))
    env["PATH"] = env["PATH"].replace("$PATH", os.environ.get("PATH", "/usr/bin:/bin"))
    return env


@pytest.fixture
def world_readable_dir() -> Iterator[Path]:
    """A directory outside pytest's private tmp tree, so an unprivileged user can reach it."""
    path = Path(tempfile.mkdtemp(prefix="edgepath-image-"))
    path.chmod(0o755)
    yield path
    for p in path.rglob("*"):
        if p.is_dir() and not p.is_symlink():
            p.chmod(p.stat().st_mode | stat.S_IWUSR)
    shutil.rmtree(path, ignore_errors=True)


def _as_user() -> list[str]:
    """Command prefix that drops root to ``nobody`` (the image runs as a non-root user); empty when not root."""
    if os.geteuid() != 0:
        return []
    nobody = pwd.getpwnam("nobody")
    return ["setpriv", f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}", "--clear-groups"]


def _python_for_unprivileged_users() -> str:
    """A Python 3.11 that the non-root user can execute (a pyenv build under /root is not reachable)."""
    for candidate in ("/usr/local/bin/python3.11", "/usr/bin/python3.11", shutil.which("python3.11")):
        if candidate and Path(candidate).exists():
            probe = subprocess.run(
                [*_as_user(), candidate, "-c", "import ensurepip, venv"], capture_output=True, timeout=60, check=False
            )
            if probe.returncode == 0:
                return candidate
    pytest.skip("no Python 3.11 with venv/ensurepip that a non-root user can run")


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_build_steps_outside_docker_give_a_working_read_only_non_root_service(world_readable_dir: Path) -> None:
    # 1. The build context: exactly what the builder stage COPYs, minus generated code (.dockerignore).
    context = world_readable_dir / "context"
    context.mkdir()
    for instr, args in _instructions("builder"):
        if instr == "COPY" and not args.startswith("--from="):  # --from: the Rust toolchain, not the context
            *sources, _dest = args.split()
            for src in sources:
                src_path = ROOT / src.rstrip("/")
                dst_path = context / src.rstrip("/")
                if src_path.is_dir():
                    shutil.copytree(
                        src_path,
                        dst_path,
                        ignore=shutil.ignore_patterns("wire", "__pycache__", "*.egg-info", "data", "target"),
                    )
                else:
                    shutil.copy2(src_path, dst_path)
    prefix = world_readable_dir / "opt-edgepath"
    python = _python_for_unprivileged_users()
    for step in ("build", "verify"):
        proc = subprocess.run(
            ["bash", "docker/build-steps.sh", step, str(prefix)],
            # the compiled engines built and verified where this machine has cargo, as the image's builder does
            env={**os.environ, "PYTHON": python, "REQUIRE_NATIVE": "1" if shutil.which("cargo") else "0"},
            cwd=context,
            capture_output=True,
            text=True,
            timeout=1500,
            check=False,
        )
        assert proc.returncode == 0, f"build-steps {step}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"

    # 2. Run it like the image: read-only install, only the scratch dir (the /tmp emptyDir) writable, non-root.
    for p in [prefix, *prefix.rglob("*")]:
        if not p.is_symlink():
            p.chmod(p.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    scratch = world_readable_dir / "tmp"
    scratch.mkdir()
    scratch.chmod(0o1777)
    env = _runtime_env(prefix, scratch)
    # The image binds 0.0.0.0, which the service refuses without authentication configured; loopback here.
    env["EDGEPATH_HOST"] = "127.0.0.1"
    # Warm start from the model artefact shipped in the image (dev profile: unsigned artefacts load).
    shipped = sorted((prefix / "models").glob("*/model.pkl"))
    if shipped:
        env["EDGEPATH_MODEL_PATH"] = str(shipped[0].parent)
    as_user = _as_user()
    ready = scratch / "ready.json"
    server = subprocess.Popen(
        [
            *as_user,
            str(prefix / "venv" / "bin" / "edgepath"),
            "serve",
            "--grpc-port",
            "0",
            "--http-port",
            "0",
            "--ready-file",
            str(ready),
        ],
        env=env,
        cwd=scratch,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 120
        while not ready.exists():
            assert server.poll() is None, server.stdout.read().decode()[-3000:] if server.stdout else ""
            assert time.monotonic() < deadline, "service from the build prefix not ready in 120 s"
            time.sleep(0.1)
        import json

        ports = json.loads(ready.read_text())
        health = [*as_user, str(prefix / "venv" / "bin" / "python"), str(prefix / "healthcheck.py")]
        check_env = {
            **env,
            "EDGEPATH_GRPC_PORT": str(ports["grpc_port"]),
            "EDGEPATH_HTTP_PORT": str(ports["http_port"]),
        }
        # The image's HEALTHCHECK command as written (gRPC health), then everything the helm test checks.
        assert subprocess.run(health, env=check_env, timeout=60, check=False).returncode == 0
        full = subprocess.run(
            [*health, "--mode=all", "--recommend"],
            env=check_env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert full.returncode == 0, full.stderr
        # The helm test under gRPC mTLS (tls.clientAuth): REST only, /healthz and /readyz, and the Recommend.
        rest = subprocess.run(
            [*health, "--mode=rest", "--recommend"],
            env=check_env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert rest.returncode == 0, rest.stderr
        # Nothing written into the (read-only) install; scratch holds only the ready file.
        assert not list(prefix.rglob("*.tmp"))
        assert sorted(p.name for p in scratch.iterdir() if not p.name.startswith(".")) == ["ready.json"]
    finally:
        server.terminate()
        server.wait(30)
    output = server.stdout.read().decode() if server.stdout else ""
    if shipped:
        assert "warm start from" in output, output[-3000:]
    # A stopped service is reported unhealthy.
    assert subprocess.run(health, env=check_env, timeout=60, check=False, capture_output=True).returncode == 1
