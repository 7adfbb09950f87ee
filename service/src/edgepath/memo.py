"""What a transport makes of the immutable section objects the engine adapters share, kept per object (issue 16).

The MLPM, congestion and steering adapters hand out the *same* frozen object for the same context or rule from their
caches (a steering rule per distinct rule, a congestion advice per context), so the transports' form of it (a
protobuf message over gRPC, its JSON over REST) is made once per object and reused by every reply that carries it.
The compiled reply encoding keeps its bytes the same way (``edgepath_native.WireMemo``).
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Generic, TypeVar

_Out = TypeVar("_Out")


class IdentityMemo(Generic[_Out]):
    """``convert(obj)`` kept by the identity of ``obj`` (bounded: ``maxsize`` entries, the oldest out first).

    What is kept must only ever be read or copied into a reply, never changed; the objects must be immutable (a
    kept object changed afterwards would be answered with its old form).

    An entry holds its object by weak reference and goes when the object does (``weakref.KeyedRef``, as
    ``WeakValueDictionary`` does): a section made for one request only (a context with subflow histories) is not
    kept alive by the memo, and a dead object's id, reused by a new object, is never answered with the old form.
    Holding the objects strongly kept ~28 tracked objects per request alive (4,096 entries per memo: ~110,000
    objects), and the full collections that walked them took ~56 ms each (a ``gc.callbacks`` probe on agent-shaped
    contexts, issue 16). ``None`` converts to ``None``.
    """

    def __init__(self, convert: Callable[[Any], _Out], maxsize: int = 4096) -> None:
        self.convert, self.maxsize = convert, maxsize
        self.cache: OrderedDict[int, tuple[weakref.KeyedRef, _Out]] = OrderedDict()

    def __call__(self, obj: Any) -> _Out | None:
        if obj is None:
            return None
        key = id(obj)
        hit = self.cache.get(key)
        if hit is not None and hit[0]() is obj:
            return hit[1]
        out = self.convert(obj)
        self.cache[key] = (weakref.KeyedRef(obj, self._forget, key), out)
        if len(self.cache) > self.maxsize:
            self.cache.popitem(last=False)
        return out

    def _forget(self, ref: weakref.KeyedRef) -> None:
        """Weak-reference callback: the object died; its entry goes (unless the id already names a newer one)."""
        entry = self.cache.get(ref.key)
        if entry is not None and entry[0] is ref:
            del self.cache[ref.key]


def bounded_put(cache: dict[Any, Any], key: Any, value: Any, max_entries: int) -> None:
    """``cache[key] = value``, first dropping the oldest entry (insertion order) of a ``cache`` that is full: a
    bounded cache whose lookups are a plain dict's (``cachetools.LRUCache`` costs ~0.8 µs per lookup in its LRU
    bookkeeping; issue 16). What a full cache drops is made again when asked."""
    if key not in cache and len(cache) >= max_entries:
        del cache[next(iter(cache))]
    cache[key] = value
