"""W3C Trace Context for pgq_cpp: the text format of ``traceparent`` and
``tracestate`` (Trace Context Level 1, the rules the server checks, ADR
0030), and OpenTelemetry spans when the ``opentelemetry`` package
(opentelemetry-api) can be imported.

The text format needs nothing but the standard library::

    from pgq_cpp.tracing import format_traceparent, parse_traceparent, parse_tracestate
    tp = parse_traceparent(job.traceparent)   # Traceparent(trace_id, parent_id, flags)
    tp.trace_id, tp.sampled                   # '4bf92f35...', True
    format_traceparent(span_context.trace_id, span_context.span_id, 1)  # '00-...-01'
    parse_tracestate("a=1,b=2")               # [('a', '1'), ('b', '2')]

OpenTelemetry (only when it imports; nothing of this happens without it):

- A producer call (``Queue.enqueue``, ``enqueue_many``, ``Stream.append``,
  ``append_many``) given no ``traceparent``/``tracestate``, made while the
  current span is recording or valid, runs in a PRODUCER span ``send
  <queue>`` (``send <stream>``), child of the current span, and stores that
  span's context with the job or event (formatted by the W3C propagator,
  ``TraceContextTextMapPropagator``, not by the global one, which may be
  another format). A call given a context stores it as it is and starts no
  span.
- The Worker runs each job in a CONSUMER span ``process <queue>`` whose
  parent is the job's stored context, with its links; the StreamConsumer
  each batch in a span ``process <stream>`` (parent: the event's context
  for a batch of one, else a new trace linked to each event's).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

R = TypeVar("R")

TRACEPARENT_BYTES = 55  # a version 00 traceparent; the server stores that form
MAX_TRACESTATE_BYTES = 512
MAX_TRACESTATE_MEMBERS = 32
# W3C: when a tracestate must be cut, members longer than this go first.
_LONG_MEMBER_BYTES = 128
# OpenTelemetry's default span link limit; the server keeps as many.
MAX_LINKS = 128

_HEX = re.compile(r"[0-9a-f]*")
_SIMPLE_KEY = re.compile(r"[a-z][a-z0-9_\-*/]{0,255}")
_TENANT_KEY = re.compile(r"[a-z0-9][a-z0-9_\-*/]{0,240}@[a-z][a-z0-9_\-*/]{0,13}")
_VALUE = re.compile(r"[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]")


def _hex(value: str, digits: int) -> bool:
    return len(value) == digits and _HEX.fullmatch(value) is not None


@dataclass(frozen=True)
class Traceparent:
    """A W3C traceparent: ``trace_id`` (32 lowercase hex digits, not all
    zeros), ``parent_id`` (16, not all zeros), ``flags`` (0-255; bit 0 is
    *sampled*). ``str()`` is its version 00 text, what the server stores."""

    trace_id: str
    parent_id: str
    flags: int = 1

    def __post_init__(self) -> None:
        if not _hex(self.trace_id, 32) or self.trace_id == "0" * 32:
            raise ValueError("a trace-id is 32 lowercase hex digits, not all zeros")
        if not _hex(self.parent_id, 16) or self.parent_id == "0" * 16:
            raise ValueError("a parent-id is 16 lowercase hex digits, not all zeros")
        if not isinstance(self.flags, int) or not 0 <= self.flags <= 0xFF:
            raise ValueError("trace flags are an integer from 0 to 255")

    @property
    def sampled(self) -> bool:
        return bool(self.flags & 1)

    def __str__(self) -> str:
        return f"00-{self.trace_id}-{self.parent_id}-{self.flags:02x}"


def parse_traceparent(text: str) -> Traceparent:
    """``text`` read as the server reads it: version 2 lowercase hex digits,
    not ``ff``; version 00 exactly 55 bytes; a later version at least 55,
    its fields after the flags starting with ``-`` (read as version 00);
    ids and flags lowercase hex, ids not all zeros. ValueError naming the
    rule otherwise."""
    if not isinstance(text, str):
        raise TypeError(f"a traceparent is a str, not {type(text).__name__}")
    if len(text) < TRACEPARENT_BYTES:
        raise ValueError("a traceparent is at least 55 bytes")
    version = text[:2]
    if not _hex(version, 2):
        raise ValueError("a traceparent's version is 2 lowercase hex digits")
    if version == "ff":
        raise ValueError("a traceparent's version is not ff")
    if version == "00" and len(text) != TRACEPARENT_BYTES:
        raise ValueError("a version 00 traceparent is 55 bytes")
    if len(text) > TRACEPARENT_BYTES and text[TRACEPARENT_BYTES] != "-":
        raise ValueError("a later version's fields after the flags start with '-'")
    if text[2] != "-" or text[35] != "-" or text[52] != "-":
        raise ValueError("a traceparent's fields are separated by '-' at bytes 3, 36 and 53")
    flags = text[53:55]
    if not _hex(flags, 2):
        raise ValueError("a traceparent's flags are 2 lowercase hex digits")
    return Traceparent(text[3:35], text[36:52], int(flags, 16))


def format_traceparent(trace_id: int | str, parent_id: int | str, flags: int = 1) -> str:
    """The version 00 traceparent of these ids (integers, as OpenTelemetry's
    SpanContext holds them, or lowercase hex) and flags. ValueError for
    zero or out-of-range ids."""
    if isinstance(trace_id, int):
        if not 0 < trace_id < 1 << 128:
            raise ValueError("a trace-id is a non-zero 128-bit integer")
        trace_id = f"{trace_id:032x}"
    if isinstance(parent_id, int):
        if not 0 < parent_id < 1 << 64:
            raise ValueError("a parent-id is a non-zero 64-bit integer")
        parent_id = f"{parent_id:016x}"
    return str(Traceparent(trace_id, parent_id, flags))


def _is_key(key: str) -> bool:
    return _SIMPLE_KEY.fullmatch(key) is not None or _TENANT_KEY.fullmatch(key) is not None


def _members(text: str) -> list[tuple[str, str]]:
    """The members of a tracestate, empty ones skipped, without its limits
    of bytes and members. ValueError for a bad member or a key twice."""
    members: list[tuple[str, str]] = []
    keys: set[str] = set()
    for raw in text.split(","):
        member = raw.strip(" \t")
        if not member:
            continue
        key, equals, value = member.partition("=")
        if not equals or not _is_key(key) or _VALUE.fullmatch(value) is None:
            raise ValueError(f"tracestate member {member[:40]!r} is not key=value by the W3C rules")
        if key in keys:
            raise ValueError(f"tracestate key {key!r} appears twice")
        keys.add(key)
        members.append((key, value))
    return members


def parse_tracestate(text: str) -> list[tuple[str, str]]:
    """A tracestate as (key, value) pairs, in order, as the server checks
    it: at most 512 bytes and 32 members, keys and values by the W3C rules,
    no key twice; empty members are allowed (and skipped). ValueError
    otherwise."""
    if not isinstance(text, str):
        raise TypeError(f"a tracestate is a str, not {type(text).__name__}")
    if len(text.encode()) > MAX_TRACESTATE_BYTES:
        raise ValueError("a tracestate is at most 512 bytes")
    members = _members(text)
    if len(members) > MAX_TRACESTATE_MEMBERS:
        raise ValueError("a tracestate has at most 32 members")
    return members


def format_tracestate(members: Iterable[tuple[str, str]]) -> str:
    """The tracestate text of (key, value) pairs, cut to W3C's limits (512
    bytes, 32 members) as W3C says to: members over 128 bytes go first,
    then members from the end. ValueError for a bad key or value, or a key
    twice."""
    text = ",".join(f"{key}={value}" for key, value in members)
    kept = [f"{key}={value}" for key, value in _members(text)]
    if len(kept) <= MAX_TRACESTATE_MEMBERS and len(",".join(kept)) <= MAX_TRACESTATE_BYTES:
        return ",".join(kept)
    kept = [member for member in kept if len(member) <= _LONG_MEMBER_BYTES]
    kept = kept[:MAX_TRACESTATE_MEMBERS]
    while len(",".join(kept)) > MAX_TRACESTATE_BYTES:
        kept.pop()
    return ",".join(kept)


def _fitted_tracestate(text: str | None) -> str | None:
    """A tracestate from a span, cut to the server's limits; None for none,
    or for one that is not W3C's (vendor data: the job goes without it
    rather than fail)."""
    if not text:
        return None
    try:
        return format_tracestate(_members(text)) or None
    except ValueError:
        return None


# ---- OpenTelemetry, when it imports ------------------------------------------


class _OpenTelemetry:
    """What the client uses of opentelemetry-api: ``opentelemetry.trace``
    and the W3C propagator."""

    def __init__(self, trace: Any, propagator: Any) -> None:
        from . import __version__

        self.trace = trace
        self.propagator = propagator
        self.tracer = trace.get_tracer("pgq_cpp", __version__)


_NOT_LOOKED = object()
_api: Any = _NOT_LOOKED
_api_lock = threading.Lock()


def _opentelemetry() -> _OpenTelemetry | None:
    """opentelemetry-api, imported at the first call; None without it."""
    global _api
    if _api is _NOT_LOOKED:
        with _api_lock:
            if _api is _NOT_LOOKED:
                try:
                    from opentelemetry import trace
                    from opentelemetry.trace.propagation.tracecontext import (
                        TraceContextTextMapPropagator,
                    )
                except ImportError:
                    _api = None
                else:
                    _api = _OpenTelemetry(trace, TraceContextTextMapPropagator())
    return _api  # type: ignore[no-any-return]


def _forget_opentelemetry() -> None:
    """Imports opentelemetry again at the next use (tests put a stand-in
    into ``sys.modules`` and take it out)."""
    global _api
    with _api_lock:
        _api = _NOT_LOOKED


def _common(destination: str, operation: str) -> dict[str, Any]:
    return {
        "messaging.system": "pgq",
        "messaging.destination.name": destination,
        "messaging.operation.type": operation,
    }


def _record_error(otel: _OpenTelemetry, span: Any, error: BaseException) -> None:
    span.record_exception(error)
    status = otel.trace.Status(otel.trace.StatusCode.ERROR, f"{type(error).__name__}: {error}")
    span.set_status(status)


def produce(
    operation: str,
    destination: str,
    traceparent: str | None,
    tracestate: str | None,
    send: Callable[[str | None, str | None], R],
    count: int | None = None,
) -> R:
    """``send(traceparent, tracestate)``, the producer's statement with the
    context to store. Given one (either), it is passed as it is (the server
    checks it: 22023). Otherwise, with opentelemetry and a current span
    that records or is valid, ``send`` runs in a PRODUCER span ``send
    <destination>`` and gets that span's context; else ``send(None,
    None)``: the untraced call. ``count``: the jobs or events of a call of
    several."""
    for name, value in (("traceparent", traceparent), ("tracestate", tracestate)):
        if value is not None and not isinstance(value, str):
            raise TypeError(f"{name} is a str, not {type(value).__name__}")
    if traceparent is not None or tracestate is not None:
        return send(traceparent, tracestate)
    otel = _opentelemetry()
    if otel is None:
        return send(None, None)
    current = otel.trace.get_current_span()
    if not (current.is_recording() or current.get_span_context().is_valid):
        return send(None, None)
    attributes = _common(destination, "send")
    attributes["messaging.operation.name"] = operation
    if count is not None:
        attributes["messaging.batch.message_count"] = count
    with otel.tracer.start_as_current_span(
        f"send {destination}",
        kind=otel.trace.SpanKind.PRODUCER,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        carrier: dict[str, str] = {}
        otel.propagator.inject(carrier)
        try:
            result = send(carrier.get("traceparent"), _fitted_tracestate(carrier.get("tracestate")))
        except BaseException as exc:
            _record_error(otel, span, exc)
            raise
        if isinstance(result, int):
            span.set_attribute("messaging.message.id", str(result))
        return result


class Processing:
    """The span a job or a batch runs in (a no-op without opentelemetry):
    ``finish(outcome, error)`` sets ``pgq.outcome`` and records the error."""

    def __init__(self, otel: _OpenTelemetry | None = None, span: Any = None) -> None:
        self._otel = otel
        self._span = span

    def finish(self, outcome: str, error: BaseException | None = None) -> None:
        if self._otel is None:
            return
        self._span.set_attribute("pgq.outcome", outcome)
        if error is not None:
            _record_error(self._otel, self._span, error)


def _carrier(traceparent: str | None, tracestate: str | None) -> dict[str, str]:
    carrier = {}
    if traceparent:
        carrier["traceparent"] = traceparent
        if tracestate:
            carrier["tracestate"] = tracestate
    return carrier


def _links(otel: _OpenTelemetry, traceparents: Iterable[str]) -> list[Any]:
    links = []
    for traceparent in traceparents:
        if len(links) == MAX_LINKS:
            break
        context = otel.propagator.extract(_carrier(traceparent, None))
        span_context = otel.trace.get_current_span(context).get_span_context()
        if span_context.is_valid:
            links.append(otel.trace.Link(span_context))
    return links


@contextmanager
def process(
    destination: str,
    parent: tuple[str | None, str | None] | None,
    links: Sequence[str],
    attributes: Mapping[str, Any],
) -> Iterator[Processing]:
    """With opentelemetry, a current CONSUMER span ``process
    <destination>`` around the block, child of ``parent`` (a stored
    (traceparent, tracestate), read by the W3C propagator; None or an
    untraced one: a new trace), linked to ``links`` (traceparents);
    otherwise nothing. The block calls ``finish`` on what it gets."""
    otel = _opentelemetry()
    if otel is None:
        yield Processing()
        return
    context = otel.propagator.extract(_carrier(*(parent or (None, None))))
    with otel.tracer.start_as_current_span(
        f"process {destination}",
        context=context,
        kind=otel.trace.SpanKind.CONSUMER,
        attributes={**_common(destination, "process"), **attributes},
        links=_links(otel, links),
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        yield Processing(otel, span)
