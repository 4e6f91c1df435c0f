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

Nothing here raises into the job: a failure prints one ``gputrace:`` line
and the call returns False.
"""

import ctypes
import os
import sys

__all__ = ["step", "mark"]

DOMAIN = "gputrace"

_mark_fn = None
_looked_up = False
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
