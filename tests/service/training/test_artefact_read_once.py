"""A model artefact is unpickled from the very bytes that were verified (:mod:`edgepath.training.artefact`).

Verifying ``model.pkl`` on one read and unpickling another left a window: whoever can write the model directory
could swap the file after the SHA-256 and HMAC checks and have the swapped pickle run. Each file is now read once.
"""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path
from typing import Any

import pytest
from edgepath.training import artefact
from edgepath.training.artefact import HMAC_FILE, MODEL_FILE, ArtefactError, load_artefact, sign_artefact

ROOT = Path(__file__).resolve().parents[3]
SHIPPED = ROOT / "models" / "primary-path-v2"
KEY = b"release-key-0123456789abcdef0123"


class _Boom:
    target: Path

    def __reduce__(self) -> Any:  # runs at unpickling time
        return (Path.mkdir, (_Boom.target,))


def _swap_during_the_hmac_check(monkeypatch: pytest.MonkeyPatch, model: Path, evil: bytes) -> None:
    """The HMAC check computes over the bytes it was given, then the file is replaced before anything is loaded."""
    real = artefact._hmac

    def hmac_then_swap(data: bytes, key: bytes) -> str:
        digest = real(data, key)
        model.write_bytes(evil)
        return digest

    monkeypatch.setattr(artefact, "_hmac", hmac_then_swap)


def test_a_pickle_swapped_after_verification_is_never_loaded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    signed = sign_artefact(SHIPPED, KEY, tmp_path / "signed")
    _Boom.target = tmp_path / "pwned"
    _swap_during_the_hmac_check(monkeypatch, signed / MODEL_FILE, pickle.dumps(_Boom()))
    loaded = load_artefact(signed, KEY)
    assert not _Boom.target.exists(), "the swapped pickle ran"
    assert loaded.bandit.policy_name == load_artefact(SHIPPED).bandit.policy_name  # the verified model
    assert (signed / MODEL_FILE).read_bytes() == pickle.dumps(_Boom()), "the file really was swapped"


def test_load_reads_each_file_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    signed = sign_artefact(SHIPPED, KEY, tmp_path / "signed")
    reads: dict[str, int] = {}
    real = Path.read_bytes

    def counted(self: Path) -> bytes:
        reads[self.name] = reads.get(self.name, 0) + 1
        return real(self)

    monkeypatch.setattr(Path, "read_bytes", counted)
    load_artefact(signed, KEY)
    assert reads.get(MODEL_FILE) == 1 and reads.get("card.json") == 1, reads


def test_signing_signs_the_verified_bytes_not_a_swapped_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In place, a pickle swapped (with a matching SHA256SUMS) once the checksums were compared is not what gets
    signed: the signature is of the checked bytes, so the swapped artefact fails the final verification."""
    copy = tmp_path / "copy"
    shutil.copytree(SHIPPED, copy)
    _Boom.target = tmp_path / "pwned"
    evil = pickle.dumps(_Boom())
    real = artefact.hmac.compare_digest
    swapped: list[bool] = []

    def compare_then_swap(a: Any, b: Any) -> bool:
        same = real(a, b)
        if not swapped:  # right after the first checksum comparison (model.pkl's)
            swapped.append(True)
            sums = (copy / "SHA256SUMS").read_text().splitlines()
            evil_sum = artefact.hashlib.sha256(evil).hexdigest()
            lines = [f"{evil_sum}  {MODEL_FILE}" if line.endswith(MODEL_FILE) else line for line in sums]
            (copy / MODEL_FILE).write_bytes(evil)
            (copy / "SHA256SUMS").write_text("\n".join(lines) + "\n")
        return same

    monkeypatch.setattr(artefact.hmac, "compare_digest", compare_then_swap)
    with pytest.raises(ArtefactError, match="HMAC signature does not match"):
        sign_artefact(copy, KEY)
    monkeypatch.undo()
    assert swapped
    assert (copy / HMAC_FILE).read_text().strip() != artefact._hmac(evil, KEY), "the swapped pickle was signed"
    with pytest.raises(ArtefactError, match="HMAC signature does not match"):
        load_artefact(copy, KEY)
    assert not _Boom.target.exists()
