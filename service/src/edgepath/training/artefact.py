"""Versioned model artefacts on disk, with an integrity check before anything is unpickled.

Layout of an artefact directory (e.g. ``models/primary-path-v1/``)::

    model.pkl     cloudpickle of {"format", "feature_names", "bandit", "classifier"} (the policies
                  hold bound methods plain pickle cannot write; plain pickle reads it)
    card.json     model card, machine-readable (data, licence, split, features, scores, command)
    card.md       the same card for people
    SHA256SUMS    ``sha256sum`` format: "<hex>  model.pkl" and "<hex>  card.json"
    model.hmac    optional: hex HMAC-SHA256 of model.pkl under a shared key

Integrity rule: :func:`load_artefact` reads ``model.pkl`` and ``card.json`` once each,
hashes those bytes, compares with ``SHA256SUMS`` (and, when a key is given, checks ``model.hmac``
with :func:`hmac.compare_digest`) and only then unpickles the very bytes it checked: a file replaced
between the check and the load is never what is unpickled. A checksum detects
corruption (truncated copy, bit rot, a hand edit); it does not authenticate:
whoever can write the directory can rewrite the sums. Authenticity needs the
HMAC key (``EDGEPATH_HMAC_KEY``): ``edgepath train-offline --sign`` signs what it trains, and
``edgepath sign-model`` (:func:`sign_artefact`) signs an artefact already written, e.g. a shipped one, so the
``prod`` profile (which loads only signed artefacts) can warm-start from it.

Check it by hand with ``cd models/primary-path-v1 && sha256sum -c SHA256SUMS``.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import pickle
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cloudpickle
import numpy as np

from edgepath.engines.features import FEATURE_NAMES
from edgepath.engines.primary_path import PrimaryPathBandit

FORMAT = "edgepath.primary-path/1"
MODEL_FILE = "model.pkl"
CARD_JSON = "card.json"
CARD_MD = "card.md"
SUMS_FILE = "SHA256SUMS"
HMAC_FILE = "model.hmac"


class ArtefactError(ValueError):
    """The artefact is missing, corrupted, unsigned when a signature is required, or incompatible."""


@dataclass(frozen=True)
class Artefact:
    """A verified, loaded artefact: the warm-started bandit, the better-arm classifier and the card."""

    path: Path
    bandit: PrimaryPathBandit
    classifier: Any
    card: dict[str, Any]


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _hmac(data: bytes, key: bytes) -> str:
    return hmac.new(key, data, hashlib.sha256).hexdigest()


def save_artefact(
    directory: Path | str,
    bandit: PrimaryPathBandit,
    classifier: Any,
    card: dict[str, Any],
    card_markdown: str,
    hmac_key: bytes | None = None,
) -> Path:
    """Write an artefact directory (created if needed); returns its path.

    The pickle holds the feature layout it was trained with, so a later change
    of :data:`~edgepath.engines.features.FEATURE_NAMES` is refused at load time.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    payload = {"format": FORMAT, "feature_names": list(FEATURE_NAMES), "bandit": bandit, "classifier": classifier}
    # sums and signature of the bytes written, not of a later read of the files
    written = {
        MODEL_FILE: cloudpickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL),
        CARD_JSON: (json.dumps(card, indent=2, sort_keys=False) + "\n").encode(),
    }
    for name, data in written.items():
        (directory / name).write_bytes(data)
    (directory / CARD_MD).write_text(card_markdown)
    (directory / SUMS_FILE).write_text("".join(f"{_sha256(data)}  {name}\n" for name, data in written.items()))
    if hmac_key:
        (directory / HMAC_FILE).write_text(_hmac(written[MODEL_FILE], hmac_key) + "\n")
    return directory


def _resolve(path: Path | str) -> Path:
    path = Path(path)
    return path.parent if path.name == MODEL_FILE else path


def verify_artefact(path: Path | str, hmac_key: bytes | None = None) -> Path:
    """Check ``SHA256SUMS`` (and the HMAC when ``hmac_key`` is given) without unpickling.

    What it says holds for the files as they were read here: to use their content, use what
    :func:`load_artefact` returns (it unpickles the bytes it checked), not a later read of the files.

    Raises
    ------
    ArtefactError
        Naming the file that is missing or does not match.
    """
    return _verified(path, hmac_key)[0]


def _verified(path: Path | str, hmac_key: bytes | None = None) -> tuple[Path, dict[str, bytes]]:
    """The artefact directory and the bytes of ``model.pkl`` and ``card.json``, each read once, checked against
    ``SHA256SUMS`` (and ``model.hmac`` when ``hmac_key`` is given): the caller uses these bytes, never the files
    again, so a file swapped after the check is not what it gets.

    Raises
    ------
    ArtefactError
        Naming the file that is missing or does not match.
    """
    directory = _resolve(path)
    if not directory.is_dir():
        raise ArtefactError(f"model artefact {directory} is not a directory")
    sums_path = directory / SUMS_FILE
    if not sums_path.is_file():
        raise ArtefactError(f"model artefact {directory}: {SUMS_FILE} is missing; refusing to load an unchecked model")
    expected: dict[str, str] = {}
    for line in sums_path.read_text().splitlines():
        parts = line.strip().split()
        if len(parts) == 2:
            expected[parts[1].lstrip("*")] = parts[0].lower()
    contents: dict[str, bytes] = {}
    for name in (MODEL_FILE, CARD_JSON):
        file = directory / name
        if name not in expected:
            raise ArtefactError(f"model artefact {directory}: {SUMS_FILE} has no checksum for {name}")
        try:
            data = file.read_bytes()
        except (FileNotFoundError, IsADirectoryError):
            raise ArtefactError(f"model artefact {directory}: {name} is missing") from None
        actual = _sha256(data)
        if not hmac.compare_digest(actual, expected[name]):
            raise ArtefactError(
                f"model artefact {directory}: {name} is corrupted (SHA-256 {actual[:12]}…, "
                f"{SUMS_FILE} says {expected[name][:12]}…); refusing to load it"
            )
        contents[name] = data
    if hmac_key:
        sig_path = directory / HMAC_FILE
        if not sig_path.is_file():
            raise ArtefactError(
                f"model artefact {directory} is not signed ({HMAC_FILE} missing) but a key is set (EDGEPATH_HMAC_KEY)"
            )
        want = _hmac(contents[MODEL_FILE], hmac_key)
        if not hmac.compare_digest(sig_path.read_text().strip(), want):
            raise ArtefactError(
                f"model artefact {directory}: HMAC signature does not match; refusing to load it (signed with another "
                f"key than this process's EDGEPATH_HMAC_KEY, or altered; sign a copy with `edgepath sign-model`)"
            )
    return directory, contents


def sign_artefact(path: Path | str, hmac_key: bytes, out: Path | str | None = None) -> Path:
    """Sign an artefact with ``hmac_key`` (``model.hmac``: hex HMAC-SHA256 of ``model.pkl``, as
    :func:`save_artefact` writes it); returns the signed directory.

    The artefact's ``SHA256SUMS`` is checked first: a corrupted model is never signed. The signature is of the
    bytes that check read (a file replaced after it fails the final verification instead of being signed). With
    ``out`` the checked bytes are written there with the artefact's other files and the copy is signed (a shipped
    model stays as it is); without it, in place. The result is verified with the key before it is returned.

    Raises
    ------
    ArtefactError
        When ``hmac_key`` is empty, or the artefact is missing or corrupted (naming the file), or changed while
        it was being signed.
    """
    if not hmac_key:
        raise ArtefactError("signing a model artefact needs an HMAC key (EDGEPATH_HMAC_KEY)")
    directory, contents = _verified(path)
    target = directory if out is None else Path(out)
    if target.resolve() != directory.resolve():
        target.mkdir(parents=True, exist_ok=True)
        for name in (CARD_MD, SUMS_FILE):
            if (directory / name).is_file():
                shutil.copy2(directory / name, target / name)
        for name, data in contents.items():
            (target / name).write_bytes(data)
    (target / HMAC_FILE).write_text(_hmac(contents[MODEL_FILE], hmac_key) + "\n")
    return verify_artefact(target, hmac_key)


class _Skipped:
    """What :class:`_ServingUnpickler` makes of a scikit-learn object: nothing (its arguments and state dropped)."""

    def __new__(cls, *args: Any, **kwargs: Any) -> _Skipped:
        return object.__new__(cls)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __setstate__(self, state: Any) -> None:
        pass


class _ServingUnpickler(pickle.Unpickler):
    """Unpickles a payload with every ``sklearn.*`` global as :class:`_Skipped`, importing no scikit-learn (which brings
    SciPy and pandas: ~1.4 s and ~110 MB of a serving process). For the serving load (:func:`load_artefact`,
    ``classifier=False``): the better-arm classifier is scikit-learn's and serving never reads it."""

    def find_class(self, module: str, name: str) -> Any:
        if module == "sklearn" or module.startswith("sklearn."):
            return _Skipped
        return super().find_class(module, name)


def _holds_skipped(obj: Any, seen: set[int] | None = None) -> bool:
    """True when ``obj``'s object graph (dict values, list/tuple/set items, instance ``__dict__`` and ``__slots__``)
    holds a :class:`_Skipped`: the bandit itself needs scikit-learn (the paper's SGD oracles)."""
    seen = set() if seen is None else seen
    stack = [obj]
    while stack:
        item = stack.pop()
        if id(item) in seen or isinstance(item, (str, bytes, int, float, bool, type(None), np.ndarray, np.generic)):
            continue
        seen.add(id(item))
        if isinstance(item, _Skipped):
            return True
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            stack.extend(item)
        else:
            stack.extend(getattr(item, "__dict__", {}).values())
            for cls in type(item).__mro__:
                for slot in getattr(cls, "__slots__", ()):
                    if isinstance(slot, str) and hasattr(item, slot):
                        stack.append(getattr(item, slot))
    return False


def _serving_payload(blob: bytes) -> Any:
    """``blob`` unpickled without scikit-learn (:class:`_ServingUnpickler`), None when the bandit needs it (its own
    oracles are scikit-learn's) or the payload does not unpickle that way: then the caller loads it whole."""
    try:
        payload = _ServingUnpickler(io.BytesIO(blob)).load()
    except Exception:  # an object whose reduction a skipped class cannot stand in for
        return None
    if not isinstance(payload, dict) or _holds_skipped(payload.get("bandit")):
        return None
    return payload


def load_artefact(path: Path | str, hmac_key: bytes | None = None, *, classifier: bool = True) -> Artefact:
    """Verify, then load an artefact written by :func:`save_artefact`.

    Parameters
    ----------
    path:
        The artefact directory or its ``model.pkl``.
    hmac_key:
        When given, the artefact must carry a matching ``model.hmac``.
    classifier:
        False (serving): the better-arm classifier is left out (``Artefact.classifier`` None) and scikit-learn is
        imported only when the bandit itself holds scikit-learn objects (the paper's SGD-oracle policies): a ridge
        learner's artefact serves without it.

    Raises
    ------
    ArtefactError
        Missing or corrupted files (checked *before* unpickling), a wrong
        signature, or a model trained with another feature layout.
    """
    directory, contents = _verified(path, hmac_key)  # each file read once: what was checked is what is loaded
    try:
        card = json.loads(contents[CARD_JSON])
        # the checked bytes (SHA256SUMS, and model.hmac with a key)
        payload = None if classifier else _serving_payload(contents[MODEL_FILE])
        if payload is None:
            payload = pickle.loads(contents[MODEL_FILE])
    except Exception as exc:  # a checksummed file that still fails to load: incompatible libraries
        raise ArtefactError(f"model artefact {directory} could not be loaded: {exc}") from exc
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise ArtefactError(f"model artefact {directory}: unknown format (want {FORMAT})")
    if list(payload.get("feature_names", [])) != list(FEATURE_NAMES):
        raise ArtefactError(
            f"model artefact {directory} was trained on another feature layout "
            f"({len(payload.get('feature_names', []))} features, this build has {len(FEATURE_NAMES)}); retrain it"
        )
    bandit = payload["bandit"]
    if not isinstance(bandit, PrimaryPathBandit):
        raise ArtefactError(f"model artefact {directory}: payload holds no PrimaryPathBandit")
    return Artefact(
        path=directory, bandit=bandit, classifier=payload.get("classifier") if classifier else None, card=card
    )
