"""Import layers as a test: the import-linter contracts of ``.importlinter`` hold for the edgepath package.

Transports -> plane -> adapters -> training -> state -> engines; engines do no I/O; the transports
do not import each other; settings import no engine; the guard reads no engine internals; the
serving path imports no lab module (the contracts are listed and explained in ``.importlinter``).
"""

from __future__ import annotations

import configparser
import os
import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
CONFIG = ROOT / ".importlinter"
#: The agent package's contracts (device runtime apart from replay/testbed, issue 14 item 5).
AGENT_CONFIG = ROOT / ".importlinter-agent"
#: Directories without __init__.py that grimp cannot see yet (see the comment in .importlinter).
NOT_YET_PACKAGES: set[str] = set()


def _lint_imports(config: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    argv = [str(LINT_IMPORTS), "--config", str(config), "--no-cache", "--no-logo"]
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)


def test_import_contracts_are_kept() -> None:
    out = _lint_imports(CONFIG)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 broken" in out.stdout


def test_agent_import_contracts_are_kept() -> None:
    out = _lint_imports(AGENT_CONFIG)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 broken" in out.stdout and "2 kept" in out.stdout


def test_the_agent_contracts_see_the_agent_package(tmp_path: Path) -> None:
    # A contract the agent breaks (its daemon imports its client) is reported: the graph is the real one.
    config = tmp_path / "agent-broken.ini"
    config.write_text(
        "[importlinter]\nroot_package = edgepath_agent\ninclude_external_packages = True\n\n"
        "[importlinter:contract:daemon-without-client]\nname = daemon imports no client (false)\n"
        "type = forbidden\nsource_modules =\n    edgepath_agent.daemon\n"
        "forbidden_modules =\n    edgepath_agent.client\n    pandas\n"
    )
    out = _lint_imports(config)
    assert out.returncode != 0
    assert "edgepath_agent.daemon -> edgepath_agent.client" in out.stdout


def test_every_layer_is_in_the_import_graph() -> None:
    # grimp skips sub-directories without __init__.py: a layer it cannot see would pass every contract.
    graph = grimp.build_graph("edgepath", cache_dir=None)
    parser = configparser.ConfigParser()
    parser.read(CONFIG)
    layers = [n for n in parser["importlinter:contract:layers"]["layers"].split() if n != "|"]
    optional = {n.strip("()") for n in layers if n.startswith("(")}
    assert optional <= NOT_YET_PACKAGES, f"optional layers {optional - NOT_YET_PACKAGES} would pass unseen"
    for name in (n for n in layers if not n.startswith("(")):
        assert name in graph.modules, f"{name} is not in the import graph (missing __init__.py?)"
        assert graph.find_children(name) or name in ("edgepath.cli", "edgepath.main", "edgepath.plane"), name


def test_a_broken_contract_is_reported(tmp_path: Path) -> None:
    config = tmp_path / "broken.ini"
    config.write_text(
        "[importlinter]\nroot_package = edgepath\n\n"
        "[importlinter:contract:plane-without-adapters]\nname = plane imports no adapter (false)\n"
        "type = forbidden\nsource_modules =\n    edgepath.plane\nforbidden_modules =\n    edgepath.adapters\n"
    )
    out = _lint_imports(config)
    assert out.returncode != 0
    assert "edgepath.plane -> edgepath.adapters" in out.stdout


def test_settings_load_no_learner() -> None:
    # The settings contract at run time: reading settings loads neither sklearn nor contextualbandits.
    code = (
        "import sys, edgepath.settings; "
        "bad = [m for m in ('sklearn', 'contextualbandits', 'edgepath.engines.primary_path') if m in sys.modules]; "
        "print(bad); raise SystemExit(1 if bad else 0)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


def test_settings_default_policy_is_the_engines_default() -> None:
    # settings spells the default out (it may not import the engine); the two must not drift apart.
    from edgepath.engines.primary_path import DEFAULT_POLICY, POLICIES
    from edgepath.settings import Settings

    assert Settings().policy == DEFAULT_POLICY and DEFAULT_POLICY in POLICIES


def test_only_the_state_package_may_import_redis() -> None:
    # Every other top-level module of edgepath is a source of the redis contract: a new package cannot slip past.
    graph = grimp.build_graph("edgepath", include_external_packages=True, cache_dir=None)
    parser = configparser.ConfigParser()
    parser.read(CONFIG)
    contract = parser["importlinter:contract:redis-only-in-state"]
    sources = set(contract["source_modules"].split())
    top_level = {m for m in graph.modules if m.startswith("edgepath.") and m.count(".") == 1}
    assert top_level - sources == {"edgepath.state"}, top_level - sources
    assert contract["forbidden_modules"].split() == ["redis"]
    importers = {m.split(".")[1] for m in graph.find_modules_that_directly_import("redis")}
    assert importers == {"state"}, importers
