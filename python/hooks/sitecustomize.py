"""gputrace's sitecustomize, put first on PYTHONPATH by ``gputrace run``.

It does three things, each of which never breaks the job (a failure prints
one ``gputrace:`` line and that hook is off):

1. runs the sitecustomize this one shadows (the next one on ``sys.path``),
   so an environment's own start-up code still runs;
2. when the job imports torch, registers an optimizer-step post hook
   (``torch.optim.optimizer.register_optimizer_step_post_hook``) that
   records one step mark per training step, unless the job calls
   ``gputrace.step()`` itself (then its own marks, with tokens, win).
   With several optimizers, the first one that steps is the step clock:
   one mark per step, not one per optimizer;
3. records how the process ended when Python knows it: ``sys.exit(N)``
   with N != 0, or an uncaught exception (``exit status=N`` /
   ``exit exception=Type`` marks).

A job that never imports torch only pays for one import-hook lookup per
imported module name.
"""


def _gputrace_say(text):
    import sys

    try:
        sys.stderr.write("gputrace: %s\n" % text)
    except Exception:
        pass


def _gputrace_chain():
    """Run the next sitecustomize on sys.path, the one this file shadows."""
    import importlib.machinery
    import importlib.util
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    # Theirs becomes the sitecustomize module, as if ours had not been there.
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


class _GputraceTorchHook:
    """A meta-path finder that registers the step hook once
    ``torch.optim.optimizer`` has been imported, then removes itself."""

    TARGET = "torch.optim.optimizer"

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.TARGET:
            return None
        import importlib.machinery
        import sys

        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return None
        # Wrap the loader's exec_module in place (the loader stays the same
        # object, so inspect.getsource and friends keep working).
        original = spec.loader.exec_module
        hook = self

        def exec_module(module):
            original(module)
            hook.registered(module)

        spec.loader.exec_module = exec_module
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
        return spec

    @staticmethod
    def registered(module):
        import weakref

        try:
            import gputrace
        except Exception as e:
            _gputrace_say("the gputrace module is not importable (%s); no step marks" % e)
            return
        clock = []  # weak reference to the optimizer that counts steps
        broken = []

        def on_step(optimizer, args, kwargs):
            if broken or gputrace.user_marks_steps:
                return
            try:
                if not clock or clock[0]() is None:
                    clock[:] = [weakref.ref(optimizer)]
                if clock[0]() is optimizer:
                    gputrace.mark("step")
            except Exception as e:
                broken.append(e)
                _gputrace_say("the optimizer-step hook failed (%s: %s); step marks are off, the job goes on" % (type(e).__name__, e))

        try:
            module.register_optimizer_step_post_hook(on_step)
        except Exception as e:
            _gputrace_say("could not register the optimizer-step hook (%s: %s); no step marks" % (type(e).__name__, e))


def _gputrace_outcome():
    """Mark a non-zero sys.exit and uncaught exceptions as the process's outcome."""
    import sys

    def record(message):
        try:
            import gputrace

            gputrace.mark(message)
        except Exception:
            pass

    previous_hook = sys.excepthook

    def excepthook(kind, value, tb):
        if not issubclass(kind, SystemExit):
            record("exit exception=%s" % getattr(kind, "__name__", "Exception"))
        previous_hook(kind, value, tb)

    sys.excepthook = excepthook
    previous_exit = sys.exit

    def exit(status=None):
        code = status if isinstance(status, int) else (0 if status is None else 1)
        if code != 0:
            record("exit status=%d" % code)
        previous_exit(status)

    sys.exit = exit


def _gputrace_start():
    import os
    import sys

    try:
        _gputrace_chain()
    except Exception as e:
        _gputrace_say("the sitecustomize that gputrace's shadows failed (%s: %s)" % (type(e).__name__, e))
    if os.environ.get("GPUTRACE_PYTHON_HOOKS", "1") == "0":
        return
    try:
        if "torch.optim.optimizer" in sys.modules:
            _GputraceTorchHook.registered(sys.modules["torch.optim.optimizer"])
        else:
            sys.meta_path.insert(0, _GputraceTorchHook())
        _gputrace_outcome()
    except Exception as e:
        _gputrace_say("could not install the Python hooks (%s: %s); the job runs without them" % (type(e).__name__, e))


_gputrace_start()
