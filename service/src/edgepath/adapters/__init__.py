"""Engine adapters: one per recommendation section, between the decision plane and the pure engines.

:mod:`edgepath.adapters.base` is the protocol, :mod:`edgepath.adapters.registry` the one
place they are registered.
"""
