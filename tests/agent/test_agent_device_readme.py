"""client-agent/README.md is the device's documentation (the unit's ``Documentation=``, installed as
``/opt/edgepath-agent/README.md``, without the repository's README): it must stand alone and agree with the code.

* every setting of :class:`~edgepath_agent.daemon.AgentConfig` is in its settings table;
* the replay extra it lists is pyproject.toml's;
* its sysusers.d and tmpfiles.d entries are the packaged files' lines.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from edgepath_agent.daemon import AgentConfig

AGENT = Path(__file__).resolve().parents[2] / "client-agent"
README = (AGENT / "README.md").read_text()


def test_the_settings_table_names_every_setting() -> None:
    rows = [line for line in README.splitlines() if line.startswith("| `")]
    named = {name for row in rows for name in re.findall(r"`(\w+)`", row.split("|")[1])}
    missing = set(AgentConfig.model_fields) - named
    assert not missing, f"client-agent/README.md's settings table lacks {sorted(missing)}"


def test_the_replay_extra_is_the_one_pyproject_installs() -> None:
    extra = tomllib.loads((AGENT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["replay"]
    listed = re.search(r"\[replay\]'.*?\(([^)]*)\)", README)
    assert listed, "the README lacks the replay extra's install line"
    assert [p.strip() for p in listed.group(1).split(",")] == extra


def test_the_sysusers_and_tmpfiles_entries_are_the_packaged_ones() -> None:
    for name in ("edgepath-agent.sysusers.conf", "edgepath-agent.tmpfiles.conf"):
        entries = [line for line in (AGENT / "systemd" / name).read_text().splitlines() if line and line[0] != "#"]
        assert entries and all(f"\n{line}\n" in README for line in entries), f"{name}: {entries}"
