"""The settings' tables: nothing is swallowed by ``content_dns``, access types are read alike everywhere.

* ``agent.toml.example`` has no ``[table]`` header, so a setting appended at its end is a setting
  (``probe = …`` is used, a stray ``wlan0 = …`` refused), not a key of the last table;
* ``content_dns`` (SSMP) takes managed interfaces as keys and IPv4 addresses as values (its DNS queries
  leave from the interface's IPv4 address): any other key is refused naming ``content_dns.<key>`` and
  saying where a setting belongs, from a file, the environment or ``run``;
* ``interfaces``' access types are read without regard to case in the file and the environment, as
  ``--interface wlan0=wifi`` is.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from edgepath_agent.cli import app, settings_error
from edgepath_agent.daemon import AgentConfig, load_config
from pydantic import ValidationError
from typer.testing import CliRunner

EXAMPLE = Path(__file__).resolve().parents[2] / "client-agent" / "agent.toml.example"


@pytest.fixture(autouse=True)
def _no_agent_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("EDGEPATH_AGENT_"):
            monkeypatch.delenv(name)


def appended(tmp_path: Path, *lines: str) -> Path:
    """``agent.toml.example`` with ``lines`` appended, as an operator adds a setting at the end."""
    f = tmp_path / "agent.toml"
    f.write_text(EXAMPLE.read_text() + "".join(f"{line}\n" for line in lines))
    return f


def test_a_setting_appended_to_the_example_is_a_setting(tmp_path: Path) -> None:
    cfg = load_config(appended(tmp_path, 'probe = "10.77.1.1:5201"'))
    assert cfg.probe == "10.77.1.1:5201" and cfg.content_dns == {}
    with pytest.raises(ValidationError, match="wlan0"):  # no table to land in: an unknown key, refused
        load_config(appended(tmp_path, 'wlan0 = "not-an-ip"'))


def test_content_dns_refuses_a_key_that_is_no_managed_interface(tmp_path: Path) -> None:
    f = tmp_path / "agent.toml"
    f.write_text(
        '[interfaces]\nwlan0 = "WIFI"\nwwan0 = "LTE"\n\n'
        '[content_dns]\nwlan0 = "192.168.1.1"\nprobe = "10.77.1.1:5201"\n'  # an operator's appended setting
    )
    with pytest.raises(ValidationError) as err:
        load_config(f)
    message = settings_error(err.value)
    assert "content_dns.probe is not a managed interface (wlan0, wwan0)" in message
    assert "probe is a setting" in message and "above the table" in message
    f.write_text('[interfaces]\nwlan0 = "WIFI"\n[content_dns]\nwwan0 = "10.64.64.64"\n')  # managed elsewhere only
    with pytest.raises(ValidationError, match=r"content_dns\.wwan0 is not a managed interface \(wlan0\)"):
        load_config(f)


def test_a_setting_below_the_interfaces_table_is_named_as_a_setting(tmp_path: Path) -> None:
    """``interval_s = 5`` written below ``[interfaces]`` belonged to that table and was refused as an access type
    ("interfaces.interval_s: Input should be 'WIFI', …"), with none of content_dns's advice."""
    f = tmp_path / "agent.toml"
    f.write_text('[interfaces]\nwlan0 = "WIFI"\ninterval_s = 5\n')
    with pytest.raises(ValidationError) as err:
        load_config(f)
    message = settings_error(err.value)
    assert "interfaces.interval_s: interval_s is a setting" in message and "move it above the table" in message
    assert 'interfaces = { wlan0 = "WIFI", wwan0 = "LTE" }' in message and "Input should be" not in message
    f.write_text('interval_s = 5\n[interfaces]\nwlan0 = "WIFI"\n')  # above the table: a setting
    assert load_config(f).interval_s == 5


@pytest.mark.parametrize(
    ("server", "says"),
    [
        ('"not-an-ip"', "content_dns.wlan0 = 'not-an-ip' is not an IPv4 address"),
        ('"192.168.1.300"', "is not an IPv4 address"),
        ('"10.0.0.1:53"', "is not an IPv4 address"),
        ("5", "content_dns.wlan0 = 5 is not an IPv4 address"),  # ip_address(5) would be 0.0.0.5
        ('"2001:db8::53"', "is an IPv6 address"),
    ],
)
def test_content_dns_refuses_a_value_that_is_no_ipv4_address(tmp_path: Path, server: str, says: str) -> None:
    f = tmp_path / "agent.toml"
    f.write_text(f'[interfaces]\nwlan0 = "WIFI"\n[content_dns]\nwlan0 = {server}\n')
    with pytest.raises(ValidationError) as err:
        load_config(f)
    assert says in settings_error(err.value)


def test_content_dns_accepts_managed_interfaces_and_ipv4_addresses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    f = tmp_path / "agent.toml"
    f.write_text('interfaces = { wlan0 = "WIFI", wwan0 = "LTE" }\ncontent_dns = { wlan0 = " 192.168.1.1 " }\n')
    assert load_config(f).content_dns == {"wlan0": "192.168.1.1"}
    monkeypatch.setenv("EDGEPATH_AGENT_CONTENT_DNS", '{"wwan0": "10.64.64.64"}')
    assert load_config(f).content_dns == {"wwan0": "10.64.64.64"}
    monkeypatch.setenv("EDGEPATH_AGENT_CONTENT_DNS", '{"eth0": "10.64.64.64"}')
    with pytest.raises(ValidationError, match=r"content_dns\.eth0 is not a managed interface"):
        load_config(f)
    # The command line's interfaces are the managed ones: a DNS server for another interface is refused.
    monkeypatch.delenv("EDGEPATH_AGENT_CONTENT_DNS")
    with pytest.raises(ValidationError, match=r"content_dns\.wlan0 is not a managed interface \(eth0\)"):
        load_config(f, interfaces={"eth0": "ETHERNET"})


def test_run_refuses_a_key_swallowed_by_content_dns_with_one_error_line(tmp_path: Path) -> None:
    f = tmp_path / "agent.toml"  # an old settings file, ending with the [content_dns] table, a setting appended
    f.write_text('[interfaces]\nlo = "ETHERNET"\n\n[content_dns]\nprobe = "10.77.1.1:5201"\n')
    out = CliRunner().invoke(app, ["run", "--dry-run", "--steps", "1", "--config", str(f)], env={"COLUMNS": "300"})
    assert out.exit_code not in (0, 1), out.output  # a settings error (its code is cli.py's), not a crash
    assert "content_dns.probe is not a managed interface (lo)" in out.output and "Traceback" not in out.output


def test_access_types_are_read_without_regard_to_case(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "agent.toml"
    f.write_text('[interfaces]\nwlan0 = "WiFi"\nwwan0 = " lte "\n')
    assert load_config(f).interfaces == {"wlan0": "WIFI", "wwan0": "LTE"}
    monkeypatch.setenv("EDGEPATH_AGENT_INTERFACES", '{"eth0": "ethernet"}')
    assert load_config(f).interfaces == {"eth0": "ETHERNET"}
    assert AgentConfig(interfaces={"wwan0": "nr"}).interfaces == {"wwan0": "NR"}
    with pytest.raises(ValidationError, match=r"interfaces\.wlan0"):
        AgentConfig(interfaces={"wlan0": "wlan"})


def test_one_service_url_may_be_given_as_a_string(tmp_path: Path) -> None:
    """``service = "grpc://…"`` (one URL, not a list) was refused as "Input should be a valid list"."""
    f = tmp_path / "agent.toml"
    f.write_text('service = "grpc://edge.example.org:50051"\n')
    assert load_config(f).service == ["grpc://edge.example.org:50051"]
    f.write_text('service = "grcp://edge.example.org:50051"\n')
    with pytest.raises(ValidationError, match="grcp"):  # still checked as a URL
        load_config(f)


def test_a_misspelt_setting_in_the_file_names_the_setting_it_probably_meant(tmp_path: Path) -> None:
    """``intervall_s = 5`` was "Extra inputs are not permitted"; a misspelt EDGEPATH_AGENT_* variable already got
    the closest name."""
    f = tmp_path / "agent.toml"
    f.write_text("intervall_s = 5\nzzzq = 1\n")
    with pytest.raises(ValidationError) as err:
        load_config(f)
    message = settings_error(err.value)
    assert "intervall_s: no such setting (did you mean interval_s?)" in message
    assert "zzzq: no such setting" in message and "not permitted" not in message
