"""Signing a model artefact that was written unsigned (a shipped one), so the prod profile can warm-start from it.

``edgepath sign-model`` / :func:`edgepath.training.artefact.sign_artefact`: the shipped models carry no
``model.hmac`` and profile prod loads only signed artefacts, so before this an operator had to retrain to deploy
them under the chart's default profile.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from edgepath.main import build_model
from edgepath.settings import Settings
from edgepath.training.artefact import HMAC_FILE, ArtefactError, load_artefact, sign_artefact

ROOT = Path(__file__).resolve().parents[3]
SHIPPED = ROOT / "models" / "primary-path-v2"
KEY = b"release-key-0123456789abcdef0123"


def _prod(model: Path, key: bytes, tmp_path: Path) -> Settings:
    tokens = tmp_path / "tokens.json"
    tokens.write_text("{}")
    return Settings(
        profile="prod",
        model_path=str(model),
        hmac_key=key.decode(),
        auth_tokens_file=tokens,
        tls_cert_file=tmp_path / "server.crt",
        tls_key_file=tmp_path / "server.key",
    )


def test_a_signed_copy_of_the_shipped_model_loads_under_prod_and_the_shipped_one_stays_as_it_was(
    tmp_path: Path,
) -> None:
    before = sorted(p.name for p in SHIPPED.iterdir())
    with pytest.raises(ArtefactError, match=rf"has no {HMAC_FILE}: sign a copy .*edgepath sign-model"):
        build_model(_prod(SHIPPED, KEY, tmp_path))
    signed = sign_artefact(SHIPPED, KEY, tmp_path / "signed")
    assert sorted(p.name for p in SHIPPED.iterdir()) == before  # the shipped artefact is not touched
    assert (signed / HMAC_FILE).is_file()
    bandit = build_model(_prod(signed, KEY, tmp_path))
    assert bandit.policy_name == load_artefact(SHIPPED).bandit.policy_name
    with pytest.raises(ArtefactError, match="HMAC signature does not match"):
        build_model(_prod(signed, b"another-key-0123456789abcdef012", tmp_path))


def test_a_corrupted_artefact_is_never_signed(tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(SHIPPED, copy)
    card = copy / "card.json"
    card.write_bytes(card.read_bytes().replace(b"ridge_squarecb", b"ridge_squarecX", 1))
    with pytest.raises(ArtefactError, match=r"card\.json is corrupted"):
        sign_artefact(copy, KEY)
    assert not (copy / HMAC_FILE).exists()
    with pytest.raises(ArtefactError, match="needs an HMAC key"):
        sign_artefact(SHIPPED, b"", tmp_path / "unsigned")


def test_the_command_signs_with_the_environments_key_and_refuses_without_one(tmp_path: Path) -> None:
    edgepath = [sys.executable, "-m", "edgepath.cli"]
    env = {k: v for k, v in os.environ.items() if k != "EDGEPATH_HMAC_KEY"}
    refused = subprocess.run(
        [*edgepath, "sign-model", str(SHIPPED), "--out", str(tmp_path / "a")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 2 and "EDGEPATH_HMAC_KEY is not set" in refused.stderr
    assert not (tmp_path / "a").exists()
    done = subprocess.run(
        [*edgepath, "sign-model", str(SHIPPED), "--out", str(tmp_path / "b")],
        env={**env, "EDGEPATH_HMAC_KEY": KEY.decode()},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert f"signed {tmp_path / 'b'}" in done.stdout
    load_artefact(tmp_path / "b", KEY)  # verifies SHA256SUMS and the HMAC
