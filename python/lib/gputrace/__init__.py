"""gputrace's Python side: tell the profiler what a training step produced.

Importable under ``gputrace run`` without installing anything (the launcher
puts this directory on ``PYTHONPATH``)::

    import gputrace
    for batch in loader:
        loss = model(batch).loss
        loss.backward()
        optimizer.step()
        gputrace.step(tokens=batch.numel(), samples=batch.shape[0])

Each call records one *step mark*: an instant NVTX-style marker in the
``gputrace`` domain named ``step tokens=N samples=M``; a step ends at its
mark. ``gputrace report`` turns the marks into steps, tokens/s, MFU and cost
per token (docs/metrics.md). Under ``gputrace run`` the mark goes straight to
the capture agent (``GPUTRACE_AGENT_LIB``); elsewhere it goes out as an NVTX
mark through ``torch.cuda.nvtx`` when that works (so Nsight Systems sees
``gputrace.step ...`` too), and otherwise nowhere.

A server of one's own marks its requests for exact per-request latency
(TTFT, ITL, end-to-end, queue time, tokens/s; docs/serving.md)::

    gputrace.request(rid, "arrive", tokens=len(prompt_ids))
    gputrace.request(rid, "scheduled")
    gputrace.request(rid, "first_token")
    gputrace.request(rid, "finish", tokens=len(output_ids))   # or "fail"

Each call is one fixed-size record (a number, a phase, a count: no string
reaches the trace), recorded only under ``gputrace run``.

Nothing here raises into the job: a failure prints one ``gputrace:`` line
and the call returns False.
"""

import ctypes
import os
import sys

__all__ = ["step", "mark", "request"]

DOMAIN = "gputrace"

_mark_fn = None
_looked_up = False
_request_fn = None
_request_looked_up = False
_warned = set()
# Set by the first step() call: the job marks its own steps, so the
# optimizer-step hook (installed by gputrace's sitecustomize) stands down.
user_marks_steps = False


def _warn(key, text):
    if key not in _warned:
        _warned.add(key)
        try:
            sys.stderr.write("gputrace: %s\n" % text)
        except Exception:
            pass


def _agent_mark():
    """The agent's ``gputrace_mark(domain, message)``, or None outside ``gputrace run``."""
    global _mark_fn, _looked_up
    if not _looked_up:
        _looked_up = True
        path = os.environ.get("GPUTRACE_AGENT_LIB")
        if path:
            try:
                # The same file the CUDA driver injects: dlopen hands back the
                # library already loaded, so both share one record queue.
                fn = ctypes.CDLL(path).gputrace_mark
                fn.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
                fn.restype = ctypes.c_int
                _mark_fn = fn
            except Exception as e:  # a missing or older agent: say so once
                _warn("load", "could not load the capture agent %s (%s); step marks are not recorded" % (path, e))
    return _mark_fn


def mark(message, domain=DOMAIN):
    """Record an instant marker ``message`` in ``domain``. True when recorded."""
    try:
        fn = _agent_mark()
        if fn is not None:
            return bool(fn(domain.encode("utf-8", "replace"), message.encode("utf-8", "replace")))
        torch = sys.modules.get("torch")
        if torch is not None and domain == DOMAIN:
            torch.cuda.nvtx.mark("gputrace." + message)
            return True
    except Exception as e:
        _warn("mark", "could not record a mark (%s: %s); the job goes on" % (type(e).__name__, e))
    return False


def _count(name, value):
    if value is None:
        return ""
    try:
        n = int(value)
        if n < 0 or n != value:
            raise ValueError
    except (TypeError, ValueError, OverflowError):
        _warn("arg-" + name, "gputrace.step(%s=%r): not a non-negative integer; recorded without it" % (name, value))
        return ""
    return " %s=%d" % (name, n)


def step(tokens=None, samples=None):
    """Mark the end of one training step and the work it did.

    ``tokens`` and ``samples``: how many this step consumed (non-negative
    integers, optional). Call once per step, after ``optimizer.step()``.
    """
    global user_marks_steps
    user_marks_steps = True
    return mark("step" + _count("tokens", tokens) + _count("samples", samples))


# The agent's phase numbers (the trace format's RequestPhase).
PHASES = {"arrive": 0, "scheduled": 1, "first_token": 2, "finish": 3, "fail": 4}
_MASK64 = (1 << 64) - 1


def _agent_request():
    """The agent's ``gputrace_request(id, phase, tokens, time_ns)``, or None outside ``gputrace run``."""
    global _request_fn, _request_looked_up
    if not _request_looked_up:
        _request_looked_up = True
        path = os.environ.get("GPUTRACE_AGENT_LIB")
        if path:
            try:
                fn = ctypes.CDLL(path).gputrace_request
                fn.argtypes = [ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_uint64]
                fn.restype = ctypes.c_int
                _request_fn = fn
            except Exception as e:
                _warn("load-request", "could not load the capture agent's request marks from %s (%s); requests are not recorded" % (path, e))
    return _request_fn


def _request_id(rid):
    """A request id as the 64-bit number the trace holds: an int as is
    (modulo 2**64); anything else by its text's 8-byte BLAKE2b hash, the same
    in every process (so that two processes of one server mark one request)."""
    if isinstance(rid, int) and not isinstance(rid, bool):
        return rid & _MASK64
    import hashlib

    if not isinstance(rid, bytes):
        rid = str(rid).encode("utf-8", "replace")
    return int.from_bytes(hashlib.blake2b(rid, digest_size=8).digest(), "little")


def request(rid, phase, tokens=None, at=None, at_ns=None):
    """Mark one moment of request ``rid`` (an int or a string) of a server.

    ``phase``: ``"arrive"`` (``tokens``: its prompt tokens), ``"scheduled"``
    (the engine took it from the queue), ``"first_token"``, ``"finish"``
    (``tokens``: the tokens it generated) or ``"fail"`` (aborted, an error;
    ``tokens``: generated so far). The moment is now, or ``at`` (seconds,
    as ``time.time()`` gives) or ``at_ns`` (``time.time_ns()``) for a server
    that kept its requests' times and marks them later. True when recorded.
    """
    try:
        number = PHASES.get(phase)
        if number is None:
            _warn("phase-%s" % phase, "gputrace.request: unknown phase %r (one of %s); not recorded" % (phase, ", ".join(PHASES)))
            return False
        n = 0
        if tokens is not None:
            try:
                n = int(tokens)
                if n < 0 or n != tokens:
                    raise ValueError
            except (TypeError, ValueError, OverflowError):
                _warn("request-tokens", "gputrace.request(tokens=%r): not a non-negative integer; recorded without it" % (tokens,))
                n = 0
        when = 0
        if at_ns is not None:
            when = int(at_ns)
        elif at is not None:
            when = int(round(float(at) * 1e9))
        if when < 0:
            _warn("request-at", "gputrace.request: a time before 1970 (%r); marked now" % (at_ns if at_ns is not None else at,))
            when = 0
        fn = _agent_request()
        if fn is None:
            return False
        return bool(fn(_request_id(rid), number, n & _MASK64, when & _MASK64))
    except Exception as e:
        _warn("request", "could not record a request mark (%s: %s); the job goes on" % (type(e).__name__, e))
    return False
