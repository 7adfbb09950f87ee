"""EdgePath's compiled decision engines (service/native/src); each has its reference in ``edgepath.engines``."""

from collections.abc import Callable, Mapping, Sequence
from typing import Any

#: ``(t, values, t_units_per_s)``: a feature's samples as columns (times in 1/t_units_per_s s), or None.
_Columns = tuple[Sequence[float], Sequence[float], float] | None
#: ``(current, slope_per_s, forecast, samples)``.
_Forecast = tuple[float, float, float, int] | None
_Classifier = tuple[Sequence[float], float]

def mlpm_decide(
    subflows: Sequence[tuple[str, _Columns, _Columns, float | None]],
    window: int,
    horizon_s: float,
    classifiers: tuple[_Classifier, _Classifier, _Classifier],
) -> tuple[list[tuple[float, float, _Forecast, _Forecast]], int, bool, bool, list[float], float, list[int]] | None:
    """MLPM's decision for one request (``edgepath.engines.mlpm.decide`` after its argument checks; Silva et al.
    2020, Eq. 1–4): per subflow ``(weight, score, rtt forecast, throughput forecast)``, the prioritised subflow's
    index, whether RTT and throughput were used, the classifier weights and bias, the subflows with fewer than 3
    samples of a known feature. None where the Python engine must decide (columns out of time order or not
    finite, no feature known for every subflow, an ``fsum`` overflow)."""

def ridge_decide(
    coef: Any,
    intercept: Any,
    x: Any,
    egreedy: bool,
    epsilon: float,
    gamma: float,
    floor: float,
    draw: float,
) -> tuple[int, float] | None:
    """The single decision of a fitted ridge policy (``edgepath.engines.linear_bandit.LinearBandit.decide``):
    SquareCB with ``gamma`` = γ_t, or ε-greedy (``egreedy``) with ``epsilon``; ``floor`` the propensity floor;
    ``draw`` the policy generator's uniform number in [0, 1). ``coef`` (K, d), ``intercept`` (K,) and ``x`` (d,)
    are float64 buffers. ``(arm index, exact propensity)``, or None where the Python engine decides with the same
    draw (an estimate not finite, an ``fsum`` overflow, shapes that disagree, an argument not a float64 buffer)."""

class ModelFeatures:
    """The primary-path bandit's context features (``edgepath.engines.features.context_features``) read from
    interface objects (``edgepath.types.InterfaceContext``): each one's ``access_type`` (its slot: the identical
    member of ``slots``, ``SLOTS`` in order) and its measurements (:func:`feature_layout`'s second list, by
    attribute: None, or a number taken as ``float``). Raises ``ValueError`` unless ``slots`` has one member per
    slot."""

    def __init__(self, slots: Sequence[Any]) -> None: ...
    def encode(self, interfaces: Sequence[Any]) -> tuple[bytearray, list[Any | None], tuple[Any, ...]] | None:
        """The vector's native-endian float64 bytes, the representative interface per slot (the objects given) and
        the arm set (the ``slots`` members offered, in order); None to hand the context back (an access type outside
        ``slots``, an attribute missing or not a number, a ``10 ** (SINR / 10)`` overflow)."""
    def encode_batch(
        self, contexts: list[Sequence[Any]]
    ) -> tuple[bytearray, list[list[Any | None]], list[tuple[Any, ...]]] | None:
        """``encode`` of each context: the ``(n, N_FEATURES)`` row-major matrix's bytes, the representatives and the
        arm set of each; None where any context is handed back."""

def feature_layout() -> tuple[list[str], list[str]]:
    """The vector's column names (``FEATURE_NAMES``) and the measurements read per interface, in order."""

class HistoryModel:
    """Builds ``cls`` (``edgepath.types.SubflowHistory``) instances of the histories in the column form it accepts
    as they are: a name of 1..``name_max`` characters, no sample objects, columns of equal length per quantity, of at
    most ``max_len`` finite values within the bounds (``t_ms``: the time columns, ms; ``rtt_ms``, ms;
    ``throughput_bps``, bit/s; inclusive). ``new``: ``object.__new__``. Raises ``ValueError`` for bounds that are not
    finite or not ordered. ``edgepath.grpc.convert.history_model_checks`` reads the checks from the model."""

    def __init__(
        self,
        cls: type,
        new: Any,
        name_max: int,
        max_len: int,
        t_ms: tuple[float, float],
        rtt_ms: tuple[float, float],
        throughput_bps: tuple[float, float],
    ) -> None: ...

class InterfaceModel:
    """Builds ``cls`` (``edgepath.types.InterfaceContext``) instances of the interfaces it accepts as they are: a
    name of 1..``name_max`` characters matching ``IFNAME_PATTERN``, an access type in the decoding's table, each
    measurement present finite and within its ``bounds`` (inclusive, in the proto's order). ``new``:
    ``object.__new__``. Raises ``ValueError`` for bounds that are not finite or not ordered.
    ``edgepath.grpc.convert.interface_model_checks`` reads the checks from the model."""

    #: The measurements it reads, in the proto's order (a list).
    MEASUREMENTS: list[str]

    def __init__(self, cls: type, new: Any, name_max: int, bounds: Sequence[tuple[float, float]]) -> None: ...

class MlpmSection:
    """MLPM's ``scheduler`` section of one priority and its settings (``window`` ≥ 1 samples, ``horizon_s`` s;
    ``classifiers``: ``(w, b)`` of Eq. 2 for both features, RTT only, throughput only), straight from a request's
    models. ``texts``: the priority's name, the reason and the features used per feature set (both, RTT only,
    throughput only) and the engine's reason function of ``(use_rtt, use_tput, short names)``; ``models``: the weight
    model (``edgepath.types.SubflowWeight``), the section model (``SchedulerAdvice``) and ``object.__new__``;
    ``bounds``: a weight's ``weight`` and ``score`` bounds, inclusive (``ValueError`` where not finite or not
    ordered). ``edgepath.engines.mlpm.compiled_section_decider`` makes it; ``edgepath.adapters.mlpm.
    section_model_checks`` reads the bounds from the models."""

    WEIGHT_FIELDS: list[str]
    SECTION_FIELDS: list[str]
    def __init__(
        self,
        window: int,
        horizon_s: float,
        classifiers: tuple[tuple[Sequence[float], float], tuple[Sequence[float], float], tuple[Sequence[float], float]],
        texts: tuple[str, tuple[str, str, str], tuple[list[str], list[str], list[str]], Callable[..., str]],
        models: tuple[type, type, Any],
        bounds: tuple[tuple[float, float], tuple[float, float]],
    ) -> None: ...
    def decide(self, interfaces: Sequence[Any], histories: Sequence[Any], advisory: str) -> Any | None:
        """The section instance, or None to hand back (a history of sample objects, a decision the engine hands
        back, a weight or score out of bounds)."""

def recommend_fields(
    data: bytes,
    access: Mapping[int, Any],
    profile: Mapping[int, Any],
    histories: HistoryModel | None = None,
    interfaces: InterfaceModel | None = None,
) -> dict[str, Any] | None:
    """A ``RecommendRequest``'s wire bytes as ``edgepath.grpc.convert.recommend_request_fields`` gives the parsed
    message (plain values for validation); enum values through ``access`` / ``profile`` (wire value → member; a
    value not in them stays an ``int``); with ``histories`` / ``interfaces``, each history / interface it accepts
    as its model instance. None where the bytes do not decode."""

def recommend_batch_fields(
    data: bytes,
    access: Mapping[int, Any],
    profile: Mapping[int, Any],
    histories: HistoryModel | None = None,
    interfaces: InterfaceModel | None = None,
) -> list[dict[str, Any]] | None:
    """A ``RecommendBatchRequest``'s wire bytes as :func:`recommend_fields`' dicts, one per request in order; None
    where the bytes do not decode."""

def wire_schema() -> bytes:
    """The schema the decoding was generated from (proto/edgepath/v1/edgepath.proto): an encoded
    ``FileDescriptorSet``."""

def encode_message(name: str, obj: Any, enums: Mapping[str, Mapping[Any, int]], memo: WireMemo | None = None) -> bytes:
    """Message ``name`` (its full name in the schema, e.g. ``edgepath.v1.RecommendBatchResponse``) encoded from
    ``obj`` as ``edgepath.grpc.convert``'s converters would build it and protobuf serialise it: each field read from
    the attribute of its name (None leaves it unset; an iterable for a repeated field), an enum member through
    ``enums[<enum full name>]`` (member → wire value). ``memo``: the bytes of the message types it names are kept
    and reused by object identity. Raises ``TypeError`` (a value of the wrong type, a missing attribute) or
    ``KeyError`` (an enum member missing from its table, a message the schema lacks), naming the field."""

class WireMemo:
    """The encoded bytes of the objects of the message types ``messages`` (full names; ``KeyError`` for one the
    schema lacks), kept by identity (a weak reference per entry, answered only while it gives the very object) for
    the next replies that carry the same object, ``maxsize`` at most, the oldest dropped first. For immutable,
    shared objects only: a kept object changed afterwards is answered with its old bytes."""

    def __init__(self, messages: Sequence[str], maxsize: int) -> None: ...
    def __len__(self) -> int: ...
