"""A stand-in for the part of opentelemetry-api that pgq_cpp.tracing uses,
which cannot be installed here (no PyPI access, no Debian package): the
modules ``opentelemetry``, ``opentelemetry.trace`` and
``opentelemetry.trace.propagation.tracecontext``, put into ``sys.modules``
by ``install()``. Its tracer records every span it starts, as an SDK with
an in-memory exporter would; its propagator reads and writes the W3C text
format with its own regular expression (not pgq_cpp.tracing's).

It mirrors the real API's names and signatures (``get_tracer``,
``get_current_span``, ``Tracer.start_as_current_span(name, context, kind,
attributes, links, start_time, record_exception, set_status_on_exception,
end_on_exit)``, ``SpanContext.is_valid``, ``Span.is_recording()``,
``Link``, ``Status``, ``StatusCode``, ``SpanKind``, the propagator's
``inject(carrier, context)`` and ``extract(carrier, context)``), not its
behaviour in every detail.
"""

from __future__ import annotations

import contextvars
import enum
import random
import re
import sys
import threading
import types
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

MODULES = (
    "opentelemetry",
    "opentelemetry.trace",
    "opentelemetry.trace.propagation",
    "opentelemetry.trace.propagation.tracecontext",
)


class SpanKind(enum.Enum):
    INTERNAL = 0
    SERVER = 1
    CLIENT = 2
    PRODUCER = 3
    CONSUMER = 4


class StatusCode(enum.Enum):
    UNSET = 0
    OK = 1
    ERROR = 2


@dataclass(frozen=True)
class Status:
    status_code: StatusCode = StatusCode.UNSET
    description: str | None = None


@dataclass(frozen=True)
class SpanContext:
    trace_id: int
    span_id: int
    is_remote: bool = False
    trace_flags: int = 1
    trace_state: str = ""  # the header text (the real one is a TraceState)

    @property
    def is_valid(self) -> bool:
        return self.trace_id != 0 and self.span_id != 0

    @property
    def trace_hex(self) -> str:
        return f"{self.trace_id:032x}"

    @property
    def span_hex(self) -> str:
        return f"{self.span_id:016x}"


INVALID_SPAN_CONTEXT = SpanContext(0, 0)


@dataclass(frozen=True)
class Link:
    context: SpanContext
    attributes: Any = None


class NonRecordingSpan:
    def __init__(self, context: SpanContext) -> None:
        self._context = context

    def get_span_context(self) -> SpanContext:
        return self._context

    def is_recording(self) -> bool:
        return False

    def set_attribute(self, key: str, value: Any) -> None:
        pass

    def record_exception(self, exception: BaseException, **kwargs: Any) -> None:
        pass

    def set_status(self, status: Status, description: str | None = None) -> None:
        pass

    def end(self) -> None:
        pass


INVALID_SPAN = NonRecordingSpan(INVALID_SPAN_CONTEXT)


@dataclass
class RecordedSpan:
    """A span the stand-in's tracer started: what an exporter would get."""

    name: str
    kind: SpanKind
    context: SpanContext
    parent: SpanContext | None
    attributes: dict[str, Any]
    links: list[Link]
    status: Status = field(default_factory=Status)
    exceptions: list[BaseException] = field(default_factory=list)
    ended: bool = False

    def get_span_context(self) -> SpanContext:
        return self.context

    def is_recording(self) -> bool:
        return not self.ended

    def set_attribute(self, key: str, value: Any) -> None:
        assert value is not None, f"attribute {key} is None"
        self.attributes[key] = value

    def record_exception(self, exception: BaseException, **kwargs: Any) -> None:
        self.exceptions.append(exception)

    def set_status(self, status: Status, description: str | None = None) -> None:
        self.status = status

    def end(self) -> None:
        self.ended = True

    @property
    def traceparent(self) -> str:
        return f"00-{self.context.trace_hex}-{self.context.span_hex}-{self.context.trace_flags:02x}"


# The context: a dict holding the current span, in a ContextVar (per thread).
_SPAN_KEY = "current-span"
_current: contextvars.ContextVar[dict[str, Any]] = contextvars.ContextVar("standin", default={})


def get_current_span(context: dict[str, Any] | None = None) -> Any:
    context = _current.get() if context is None else context
    return context.get(_SPAN_KEY, INVALID_SPAN)


def set_span_in_context(span: Any, context: dict[str, Any] | None = None) -> dict[str, Any]:
    base = _current.get() if context is None else context
    return {**base, _SPAN_KEY: span}


class Recorder:
    """Every span started, in start order; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spans: list[RecordedSpan] = []

    def add(self, span: RecordedSpan) -> None:
        with self._lock:
            self._spans.append(span)

    def spans(self, name: str | None = None, ended: bool = True) -> list[RecordedSpan]:
        with self._lock:
            return [
                s
                for s in self._spans
                if (name is None or s.name == name) and (s.ended or not ended)
            ]


class Tracer:
    def __init__(self, recorder: Recorder, name: str, version: str | None) -> None:
        self.recorder = recorder
        self.name = name
        self.version = version

    def start_span(
        self,
        name: str,
        context: dict[str, Any] | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: dict[str, Any] | None = None,
        links: Any = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
    ) -> RecordedSpan:
        parent = get_current_span(context).get_span_context()
        if parent.is_valid:
            own = SpanContext(
                parent.trace_id, _random_id(64), False, parent.trace_flags, parent.trace_state
            )
        else:
            own = SpanContext(_random_id(128), _random_id(64))
        for key, value in (attributes or {}).items():
            assert value is not None, f"attribute {key} is None"
        span = RecordedSpan(
            name,
            kind,
            own,
            parent if parent.is_valid else None,
            dict(attributes or {}),
            list(links or []),
        )
        self.recorder.add(span)
        return span

    @contextmanager
    def start_as_current_span(
        self,
        name: str,
        context: dict[str, Any] | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: dict[str, Any] | None = None,
        links: Any = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
        end_on_exit: bool = True,
    ) -> Iterator[RecordedSpan]:
        span = self.start_span(name, context, kind, attributes, links, start_time)
        token = _current.set(set_span_in_context(span, context))
        try:
            yield span
        except BaseException as exc:
            if record_exception:
                span.record_exception(exc)
            if set_status_on_exception:
                span.set_status(Status(StatusCode.ERROR, str(exc)))
            raise
        finally:
            _current.reset(token)
            if end_on_exit:
                span.end()


def _random_id(bits: int) -> int:
    return random.getrandbits(bits) or 1


_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$")


class TraceContextTextMapPropagator:
    def inject(self, carrier: dict[str, str], context: dict[str, Any] | None = None) -> None:
        span_context = get_current_span(context).get_span_context()
        if not span_context.is_valid:
            return
        carrier["traceparent"] = (
            f"00-{span_context.trace_hex}-{span_context.span_hex}-{span_context.trace_flags:02x}"
        )
        if span_context.trace_state:
            carrier["tracestate"] = span_context.trace_state

    def extract(
        self, carrier: dict[str, str], context: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        header = carrier.get("traceparent")
        match = _TRACEPARENT.match(header) if header else None
        if match is None or match.group(1) == "ff" or (match.group(1) == "00" and match.group(5)):
            return set_span_in_context(INVALID_SPAN, context)
        trace_id, span_id = int(match.group(2), 16), int(match.group(3), 16)
        if not trace_id or not span_id:
            return set_span_in_context(INVALID_SPAN, context)
        flags = int(match.group(4), 16)
        remote = SpanContext(trace_id, span_id, True, flags, carrier.get("tracestate", ""))
        return set_span_in_context(NonRecordingSpan(remote), context)


@contextmanager
def current(span: Any) -> Iterator[None]:
    """Makes ``span`` the current span in the block (as ``trace.use_span``)."""
    token = _current.set(set_span_in_context(span))
    try:
        yield
    finally:
        _current.reset(token)


def remote_span(traceparent: str, tracestate: str = "") -> NonRecordingSpan:
    """The span an HTTP framework's extract() makes of an incoming request's
    headers: valid, not recording."""
    carrier = {"traceparent": traceparent, "tracestate": tracestate}
    context = TraceContextTextMapPropagator().extract(carrier)
    return get_current_span(context)


def install() -> tuple[Recorder, dict[str, Any]]:
    """Puts the stand-in into ``sys.modules``; its recorder and what the
    modules' entries were (for ``uninstall``)."""
    saved = {name: sys.modules.get(name) for name in MODULES}
    recorder = Recorder()
    package = types.ModuleType("opentelemetry")
    package.__path__ = []  # a package
    trace = types.ModuleType("opentelemetry.trace")
    trace.__path__ = []
    for name, value in {
        "SpanKind": SpanKind,
        "StatusCode": StatusCode,
        "Status": Status,
        "SpanContext": SpanContext,
        "Link": Link,
        "NonRecordingSpan": NonRecordingSpan,
        "INVALID_SPAN": INVALID_SPAN,
        "INVALID_SPAN_CONTEXT": INVALID_SPAN_CONTEXT,
        "get_current_span": get_current_span,
        "set_span_in_context": set_span_in_context,
        "get_tracer": lambda name, version=None, *args, **kwargs: Tracer(recorder, name, version),
    }.items():
        setattr(trace, name, value)
    propagation = types.ModuleType("opentelemetry.trace.propagation")
    propagation.__path__ = []
    tracecontext = types.ModuleType("opentelemetry.trace.propagation.tracecontext")
    tracecontext.TraceContextTextMapPropagator = (  # type: ignore[attr-defined]
        TraceContextTextMapPropagator
    )
    package.trace = trace  # type: ignore[attr-defined]
    trace.propagation = propagation  # type: ignore[attr-defined]
    propagation.tracecontext = tracecontext  # type: ignore[attr-defined]
    sys.modules.update(
        {
            "opentelemetry": package,
            "opentelemetry.trace": trace,
            "opentelemetry.trace.propagation": propagation,
            "opentelemetry.trace.propagation.tracecontext": tracecontext,
        }
    )
    return recorder, saved


def block() -> dict[str, Any]:
    """Makes ``import opentelemetry`` fail (None in ``sys.modules``), as
    where it is not installed; what the entries were."""
    saved = {name: sys.modules.get(name) for name in MODULES}
    for name in MODULES:
        sys.modules[name] = None  # type: ignore[assignment]
    return saved


def uninstall(saved: dict[str, Any]) -> None:
    for name, module in saved.items():
        if module is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = module
