"""Readers of public measurement data sets (training and evaluation only; never on the serving path)."""

from __future__ import annotations

from pathlib import Path

#: The repository this package runs from (``service/src/edgepath/datasets`` -> four levels up), whatever the working
#: directory. An installed (non-editable) package has no repository around it: :func:`repo_file` then finds nothing.
REPO_ROOT = Path(__file__).resolve().parents[4]

#: The vendored "Mobile Access Bandwidth in Practice" subset (Apache-2.0, its LICENSE.txt and ATTRIBUTION.md beside it).
MOBILEBANDWIDTH = "service/data/mobilebandwidth"


def repo_file(relative: str) -> Path | None:
    """``relative`` (a repository path such as ``service/data/mobilebandwidth/4G.csv``) under :data:`REPO_ROOT`
    when that file exists, else None."""
    path = REPO_ROOT / relative
    return path if path.is_file() else None


def repo_relative(path: Path) -> str:
    """``path`` as a repository path when it lies in the repository (portable in reports and model cards), else as
    given."""
    try:
        return path.resolve().relative_to(REPO_ROOT).as_posix()
    except ValueError:
        return str(path)
