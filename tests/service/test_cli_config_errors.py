"""`edgepath serve`/`train` refuse a misconfiguration with one `Error:` line naming the setting as the operator gave
it (environment variable, option or settings-file key) and its value, exit 2 (click's usage error), no traceback.

Each case below ended in a Python traceback and exit 1 (or named the wrong thing): a store URL of another scheme or
with a port that is not a number, an unknown log level, a list variable not in JSON, a settings file missing or
malformed, two servers on one port, a tokens file or TLS key this process may not read (reported as a gRPC port
that "cannot be bound"), a settings-file typo reported as an environment variable, EDGEPATH_MODEL_PATH reported as
``--model``. Real processes of the real CLI, as an operator runs them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from service_harness import edgepath_cli

#: Beyond :func:`edgepath_cli`'s own timeout, so that a process that started instead of refusing is killed by it.
pytestmark = pytest.mark.timeout(150)
#: A Redis nobody listens on: the commands below are refused before they would connect.
NO_REDIS = "redis://127.0.0.1:1/0"


def error_line(out: subprocess.CompletedProcess[str]) -> str:
    """The one ``Error:`` line of a usage error (exit 2), with nothing but click's usage lines around it."""
    assert out.returncode == 2, out.stderr
    lines = [line for line in out.stderr.splitlines() if line]
    errors = [line for line in lines if line.startswith("Error: ")]
    assert len(errors) == 1, out.stderr
    assert [line for line in lines if not line.startswith(("Error: ", "Usage: ", "Try "))] == [], out.stderr
    return errors[0]


#: (environment, what the error line says): each names the variable, its setting and the value given.
ENV_CASES = {
    "store scheme": (
        {"EDGEPATH_STORE_URL": "mysql://x"},
        "EDGEPATH_STORE_URL (store_url): unknown store URL 'mysql://x': use memory:// or redis://HOST:PORT/DB",
    ),
    "store port": (
        {"EDGEPATH_STORE_URL": "redis://:s3cret@localhost:notaport/0"},
        "EDGEPATH_STORE_URL (store_url): store URL 'redis://:***@localhost:notaport/0' cannot be used: Port could "
        "not be cast to integer value as 'notaport'",
    ),
    "log level": (
        {"EDGEPATH_LOG_LEVEL": "VERBOSE"},
        "EDGEPATH_LOG_LEVEL (log_level): unknown log level 'VERBOSE': one of CRITICAL, ERROR, WARNING, INFO, DEBUG",
    ),
    "list not JSON": (
        {"EDGEPATH_AUTH_ADMIN_IDS": "ops-console"},
        "EDGEPATH_AUTH_ADMIN_IDS (auth_admin_ids) is not a JSON list: 'ops-console'; write it as JSON, e.g. "
        '["ops-console"]',
    ),
    "equal ports": (
        {"EDGEPATH_GRPC_PORT": "50999", "EDGEPATH_METRICS_PORT": "50999"},
        "grpc_port (EDGEPATH_GRPC_PORT) and metrics_port (EDGEPATH_METRICS_PORT) are both 50999: each server needs "
        "a port of its own",
    ),
}


@pytest.mark.parametrize(
    ("command", "case"),
    # train binds only metrics_port: its ports are not compared (test_train_may_take_the_deciders_http_port...)
    [
        (command, case)
        for case in ENV_CASES
        for command in ("serve", "train")
        if (command, case) != ("train", "equal ports")
    ],
)
def test_a_bad_environment_variable_is_one_error_line_naming_it(command: str, case: str) -> None:
    env, says = ENV_CASES[case]
    base = {"EDGEPATH_STORE_URL": NO_REDIS} if command == "train" else {"EDGEPATH_HTTP_PORT": "0"}
    out = edgepath_cli(command, env_extra=base | env)
    line = error_line(out)
    assert says in line, line
    assert "s3cret" not in out.stderr


def test_train_may_take_the_deciders_http_port_for_its_metrics() -> None:
    """The chart gives the trainer the deciders' settings (EDGEPATH_HTTP_PORT) and its own EDGEPATH_METRICS_PORT:
    the same number is no conflict for a process that binds only the metrics port (train gets past the settings to
    the store, here refused as not shared)."""
    out = edgepath_cli(
        "train", "--store", "memory://", env_extra={"EDGEPATH_HTTP_PORT": "8080", "EDGEPATH_METRICS_PORT": "8080"}
    )
    assert error_line(out) == "Error: Invalid value: train needs a shared store: --store redis://HOST:PORT/DB"


def test_a_store_option_with_a_bad_port_names_the_option() -> None:
    line = error_line(edgepath_cli("train", "--store", "redis://localhost:notaport/0"))
    assert "--store (store_url): store URL 'redis://localhost:notaport/0' cannot be used" in line, line


def test_an_option_out_of_range_names_the_option() -> None:
    line = error_line(edgepath_cli("serve", "--grpc-port", "70000", "--http-port", "0"))
    assert "--grpc-port (grpc_port): Input should be less than or equal to 65535 (given: 70000)" in line, line


@pytest.mark.parametrize(
    ("name", "text", "says"),
    [
        ("absent.toml", None, "settings file {path} (--config) cannot be read: No such file or directory"),
        ("bad.toml", "grpc_port = \n", "settings file {path} (--config) is not valid TOML: Invalid value"),
        ("bad.json", '{"grpc_port": ', "settings file {path} (--config) is not valid JSON: Expecting value"),
        ("list.json", "[1]", "settings file {path} (--config) holds a list, not a JSON object"),
        ("typo.toml", "grpc_prot = 5\n", "grpc_prot in {path} (grpc_prot): Extra inputs are not permitted (given: 5)"),
        (
            "nested.toml",
            "[bandit]\nexplore_prob = 1.5\n",
            "bandit.explore_prob in {path} (bandit.explore_prob): Input should be less than or equal to 1 (given: 1.5)",
        ),
    ],
)
def test_a_bad_settings_file_is_one_error_line_naming_the_file_or_its_key(
    tmp_path: Path, name: str, text: str | None, says: str
) -> None:
    path = tmp_path / name
    if text is not None:
        path.write_text(text)
    line = error_line(edgepath_cli("serve", "--config", str(path), "--grpc-port", "0", "--http-port", "0"))
    assert says.format(path=path) in line, line
    assert "EDGEPATH_GRPC_PROT" not in line  # a file's key is not reported as a variable


def test_a_model_from_the_environment_is_named_by_its_variable(tmp_path: Path) -> None:
    absent = tmp_path / "no-model"
    line = error_line(edgepath_cli("serve", "--http-port", "0", env_extra={"EDGEPATH_MODEL_PATH": str(absent)}))
    assert line.startswith("Error: Invalid value for EDGEPATH_MODEL_PATH: "), line
    line = error_line(edgepath_cli("serve", "--http-port", "0", "--model", str(absent)))
    assert line.startswith("Error: Invalid value for --model: "), line


#: (how the unknown policy is given, the source the error line names): the variables (nested and flat), the option,
#: and the settings file's key (nested and flat); ``{path}`` is the settings file.
POLICY_SOURCES = {
    "nested variable": ({"EDGEPATH_BANDIT__POLICY": "nope"}, (), None, "EDGEPATH_BANDIT__POLICY"),
    "flat variable": ({"EDGEPATH_POLICY": "nope"}, (), None, "EDGEPATH_POLICY"),
    "option": ({}, ("--policy", "nope"), None, "--policy"),
    "settings file": ({}, (), '[bandit]\npolicy = "nope"\n', "bandit.policy in {path}"),
    "flat settings key": ({}, (), 'policy = "nope"\n', "policy in {path}"),
}


@pytest.mark.parametrize("command", ["serve", "train"])
@pytest.mark.parametrize("given", list(POLICY_SOURCES))
def test_an_unknown_policy_names_where_it_was_given(tmp_path: Path, command: str, given: str) -> None:
    env, args, text, source = POLICY_SOURCES[given]
    path = tmp_path / "settings.toml"
    if text is not None:
        path.write_text(text)
        args = (*args, "--config", str(path))
    base = {"EDGEPATH_STORE_URL": NO_REDIS} if command == "train" else {"EDGEPATH_HTTP_PORT": "0"}
    line = error_line(edgepath_cli(command, *args, env_extra=base | env))
    says = f"Error: Invalid value: {source.format(path=path)} (bandit.policy): unknown policy 'nope'; choose one of "
    assert line.startswith(says), line
    assert "ridge_squarecb" in line, line


def unreadable_prefix(path: Path) -> tuple[str, ...]:
    """Make ``path`` unreadable by the command run under the returned argv prefix: mode 0600 and owned by another
    uid (as `edgepath tokens add` on the host leaves a file the container's uid 10001 cannot read); as root, the
    command runs without CAP_DAC_OVERRIDE/CAP_DAC_READ_SEARCH (setpriv), which would read any file."""
    path.chmod(0o600)
    if os.geteuid() != 0:
        path.chmod(0o000)  # its owner may not read it either
        return ()
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv (util-linux): cannot drop the capability to read any file")
    os.chown(path, 4242, 4242)
    drop = "-dac_override,-dac_read_search"
    return ("setpriv", f"--inh-caps={drop}", f"--bounding-set={drop}")


def test_an_unreadable_tokens_file_names_the_file_the_uid_and_the_images_uid(tmp_path: Path) -> None:
    from edgepath.security.auth import TokenFile

    tokens = tmp_path / "tokens.json"
    TokenFile(tokens).add("phone-1")
    prefix = unreadable_prefix(tokens)
    out = edgepath_cli("serve", "--http-port", "0", prefix=prefix, env_extra={"EDGEPATH_AUTH_TOKENS_FILE": str(tokens)})
    line = error_line(out)
    assert f"auth_tokens_file (EDGEPATH_AUTH_TOKENS_FILE) {tokens} is not readable by uid {os.geteuid()}" in line
    assert "the container image runs as uid 10001" in line, line


@pytest.mark.parametrize("unreadable", ["tls_key_file", "tls_cert_file", "tls_client_ca_file"])
def test_an_unreadable_tls_file_is_named_not_reported_as_a_port(tmp_path: Path, unreadable: str) -> None:
    """Before, the files were read inside the bind's try: ``gRPC port 50051 on 127.0.0.1 cannot be bound:
    Permission denied``. The files' contents do not matter: they are refused before they are parsed."""
    files = {}
    for name in ("tls_key_file", "tls_cert_file", "tls_client_ca_file"):
        files[name] = tmp_path / f"{name}.pem"
        files[name].write_text("-----BEGIN PLACEHOLDER-----\n")
        files[name].chmod(0o600)
    prefix = unreadable_prefix(files[unreadable])
    env = {f"EDGEPATH_{name.upper()}": str(path) for name, path in files.items()}
    line = error_line(edgepath_cli("serve", "--grpc-port", "0", "--http-port", "0", prefix=prefix, env_extra=env))
    assert f"{unreadable} (EDGEPATH_{unreadable.upper()}) {files[unreadable]} is not readable" in line, line
    assert "port" not in line, line


def test_what_serve_logs_before_it_refuses_is_in_the_log_format_asked(tmp_path: Path) -> None:
    """``EDGEPATH_LOG_FORMAT=json``: the start-up checks' own lines (here the warm-start check's WARNING that the
    model was trained for another policy) are JSON, and the refusal is still click's plain usage error. Before, the
    checks ran before logging was configured: that WARNING was Python's last-resort plain text, without time, level
    or logger."""
    import json

    model = Path(__file__).resolve().parents[2] / "models" / "primary-path-v1"
    out = edgepath_cli(
        "serve",
        "--model",
        str(model),
        "--auth-tokens-file",
        str(tmp_path / "absent-tokens"),
        "--http-port",
        "0",
        "--grpc-port",
        "0",
        env_extra={"EDGEPATH_LOG_FORMAT": "json"},
    )
    assert out.returncode == 2, out.stderr
    usage = ("Error: ", "Usage: ", "Try ")
    logged = [line for line in out.stderr.splitlines() if line and not line.startswith(usage)]
    records = [json.loads(line) for line in logged]  # every line the service logged is JSON
    assert any(r["level"] == "WARNING" and "trained for policy" in r["message"] for r in records), out.stderr
    assert len([line for line in out.stderr.splitlines() if line.startswith("Error: ")]) == 1, out.stderr
