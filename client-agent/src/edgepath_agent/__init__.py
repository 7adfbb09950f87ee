"""EdgePath device agent: collects radio context, asks the service, applies and measures."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("edgepath-agent")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"
