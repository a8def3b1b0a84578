# sandboxd_cell.py: how sandboxd runs Python code (docs/INTERPRETER.md).
# Embedded in the engine, written with its .pyc at start (pylib.c) and bound
# read-only at /run/sandboxd in every run; started as "python3 -u -c
# SANDBOX_CELL_LOADER MODE ..." (sandbox.h), which imports it and calls main():
#
#   script /workspace/main.py ARGS...  a stateless or FILES-session run: the
#       script as python3 would run it (argv, __main__, sys.path[0],
#       tracebacks, exit status), plus the rich results: the value of the
#       last expression (written to /workspace/.sandboxd-result) and the
#       matplotlib figures shown or left open (output/figure-N.png).
#   kernel  an INTERPRETER session's living process: cells arrive on fd 0 (a
#       socket), each with its own stdin, stdout and stderr (passed as
#       descriptors), and run in one __main__ that lives between them.
#
# Everything here runs inside the sandbox, as the sandbox's uid: the code it
# runs can change any of it, and the server trusts nothing it reports beyond
# the session's own results (sizes are checked on the host).
import os
import sys

RESULT_MAX = 65536  # bytes of the last expression's repr (text/plain)
OUTPUT_DIR = "output"
_state = {"figures": 0}


def _text_plain(value):
    """The value as Jupyter's text/plain shows it (repr), bounded."""
    try:
        text = repr(value)
    except BaseException as e:  # a broken __repr__ is the value's own affair
        text = "<repr failed: %s: %s>" % (type(e).__name__, e)
    data = text.encode("utf-8", "backslashreplace")
    if len(data) <= RESULT_MAX:
        return data, False
    return data[:RESULT_MAX].decode("utf-8", "ignore").encode(), True


def _figure_path():
    os.makedirs(OUTPUT_DIR, exist_ok=True)
    while True:
        _state["figures"] += 1
        path = os.path.join(OUTPUT_DIR, "figure-%d.png" % _state["figures"])
        try:  # never over a file of the user's (or a symlink)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
            return fd, path
        except FileExistsError:
            continue


def _note_savefig():
    """Figure.savefig marks the figures the code saved itself, so that
    save_figures() does not send them back a second time (nor render them
    again). Idempotent; nothing before matplotlib.figure is imported."""
    mod = sys.modules.get("matplotlib.figure")
    cls = getattr(mod, "Figure", None)
    if cls is None or getattr(cls.savefig, "_sandboxd", False):
        return
    import functools  # matplotlib has imported it already
    orig = cls.savefig

    @functools.wraps(orig)
    def savefig(self, *args, **kwargs):
        r = orig(self, *args, **kwargs)
        self._sandboxd_saved = True
        return r

    savefig._sandboxd = True
    cls.savefig = savefig


def save_figures():
    """Every open matplotlib figure as output/figure-N.png, then closed (as
    a notebook shows a cell's figures), but those the code saved itself
    (closed only). Nothing when pyplot was never imported."""
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return []
    saved = []
    for num in list(plt.get_fignums()):
        fig = plt.figure(num)
        if getattr(fig, "_sandboxd_saved", False):
            plt.close(fig)
            continue
        fd, path = _figure_path()
        with os.fdopen(fd, "wb") as f:
            fig.savefig(f, format="png")
        plt.close(fig)
        saved.append(path)
    return saved


def _copy_fontlist():
    """The engine's matplotlib font list (fontlist.c: made once per server
    at SANDBOX_LIB_DIR/matplotlib) into matplotlib's config directory, where
    matplotlib reads it instead of scanning the system's fonts (about half
    a second). Never over a file there; nothing when the list is not ready
    (matplotlib scans, as without it) or MPLCONFIGDIR is unset. matplotlib
    checks the list's version itself."""
    dst = os.environ.get("MPLCONFIGDIR")
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "matplotlib")
    try:
        names = [n for n in os.listdir(src) if n.startswith("fontlist-v") and n.endswith(".json")]
        if not dst or not names:
            return
        os.makedirs(dst, exist_ok=True)
    except OSError:
        return
    for name in names:
        try:
            with open(os.path.join(src, name), "rb") as f:
                data = f.read()
            fd = os.open(os.path.join(dst, name),
                         os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        except OSError:
            pass


class _FontList:
    """On sys.meta_path ahead of the path finder from this module's import
    until matplotlib's (a zygote's preload, or the run's code): it then
    copies the font list (_copy_fontlist) and leaves; it never imports
    anything itself."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name == "matplotlib":
            try:
                sys.meta_path.remove(_FontList)
            except ValueError:
                pass
            _copy_fontlist()
        return None


if "matplotlib" not in sys.modules:
    sys.meta_path.insert(0, _FontList)


_INLINE = "module://sandboxd_inline"  # the runs' MPLBACKEND unless a request names one


class _InlineBackend:
    """The matplotlib backend MPLBACKEND names (module://sandboxd_inline):
    Agg's canvas, and a show() that saves the figures. A finder on
    sys.meta_path: nothing of matplotlib is imported until the code does."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name != "sandboxd_inline":
            return None
        return type(sys.__spec__)(name, _InlineBackend)

    @staticmethod
    def create_module(spec):
        return None

    @staticmethod
    def exec_module(mod):
        from matplotlib.backends import backend_agg
        _note_savefig()
        mod.FigureCanvas = backend_agg.FigureCanvasAgg
        mod.FigureManager = backend_agg.FigureManagerBase
        def show(*args, **kwargs):
            save_figures()

        mod.show = show


_SPLIT_TRIES = 4  # statement starts tried from the end before the whole parse
# A line starting with one of these words is a compound statement: all of it
# up to the end is that one statement, whatever ';' its suite holds.
_COMPOUND = ("if", "for", "while", "with", "try", "def", "class", "async")


def _first_word(line):
    n = 0
    while n < len(line) and (line[n:n + 1].isalnum() or line[n:n + 1] in ("_", b"_")):
        n += 1
    return line[:n]


def warm():
    """In a zygote, after its preload: when the preload imported matplotlib,
    one figure drawn and saved as PNG to memory, so that what every plot
    loads on its first draw (the font files, the Agg renderer, text
    layout and PNG writing) is in the zygote, shared by its runs, instead
    of loaded again in each (a quarter of a forked plot's time, measured).
    A figure of its own (matplotlib.figure.Figure): nothing of pyplot's
    state (figure numbers, current figure) changes. Its fonts are let go
    again: each holds its font file open, and a run closes every
    descriptor but its stdio before its code runs, so a font kept from here
    would read a closed descriptor (or one the run opened since). Loading
    the fonts is the cheap part (measured: the same gain without them).
    Best effort: a matplotlib that cannot draw fails the runs that plot,
    not the zygote."""
    if "matplotlib" not in sys.modules:
        return
    # What each run would do first (script()), done once here: every object
    # a run writes is a page it copies (about 60 of its 400 page faults).
    try:
        sys.modules["matplotlib"].rcParams["backend"] = _INLINE
    except Exception:  # noqa: BLE001: best effort, see above
        pass
    try:
        import io
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        fig = Figure()
        FigureCanvasAgg(fig)
        ax = fig.subplots()
        ax.plot([1, 2, 3, 4], [3, 1, 4, 1], label="warm")
        ax.set_title("warm")
        ax.legend()
        fig.savefig(io.BytesIO(), format="png")
        del fig, ax
        _note_savefig()
    except Exception:  # noqa: BLE001: best effort, see above
        pass
    fm = sys.modules.get("matplotlib.font_manager")
    clear = getattr(getattr(fm, "_get_font", None), "cache_clear", None)
    if clear is not None:
        clear()
    import gc
    gc.collect()


def _split_by_lines(source, filename):
    """The cell as (codes, last) without the syntax tree, or None when
    unsure. A top-level statement starts at a line's start (column 0, or a
    lone backslash line joining the next), so for such lines from the end:
    when the lines before one compile as statements and the rest as an
    expression, the last statement is that expression (the lines before
    close every bracket and string, so the rest starts a statement, and an
    expression is one statement). When the rest compiles only as
    statements, it is one statement that is not an expression if it starts
    a compound statement or holds no ';' (a simple statement ends at its
    line's end); otherwise, unsure. Two compiles of halves cost what
    python3's one compile of the whole costs; the syntax tree (_ast) cost
    about 2.4 ms more per run. A cookie (PEP 263) or a __future__ import,
    which apply to the whole file, and a lone CR line end take the whole
    parse."""
    if isinstance(source, bytes):
        nl, cr, crlf, skip, semi, words = b"\n", b"\r", b"\r\n", b" \t#)]}\r", b";", \
            tuple(w.encode() for w in _COMPOUND)
        future, coding = b"__future__", b"coding"
    else:
        nl, cr, crlf, skip, semi, words = "\n", "\r", "\r\n", " \t#)]}\r", ";", _COMPOUND
        future, coding = "__future__", "coding"
    second = source.find(nl, source.find(nl) + 1)  # the cookie's two lines: no copy of the rest
    if (future in source or coding in source[:second if second >= 0 else len(source)]
            or source.count(cr) != source.count(crlf)):
        return None
    i, end, tries = source.count(nl), len(source), 0
    while i >= 0:
        start = source.rfind(nl, 0, end) + 1
        line, cut, lineno = source[start:end], start, i
        end, i = start - 1, i - 1
        if not line or line[:1] in skip:
            continue
        tries += 1
        if tries > _SPLIT_TRIES:
            return None
        rest = nl * lineno + source[cut:]  # its line numbers as in the whole
        last = stmt = None
        try:
            last = compile(rest, filename, "eval", dont_inherit=True)
        except SyntaxError:
            try:
                stmt = compile(rest, filename, "exec", dont_inherit=True)
            except SyntaxError:
                continue
        try:
            codes = [compile(source[:cut], filename, "exec", dont_inherit=True)] if cut else []
        except SyntaxError:
            continue
        if last is not None:
            return codes, last
        if line[:1] in ("@", b"@") or _first_word(line) in words or semi not in rest:
            return codes + [stmt], None
        return None
    return None


def _split(source, filename):
    """The code compiled as a notebook cell: the statements (code objects
    run in turn), and the last one apart when it is an expression (its value
    is the cell's result)."""
    split = _split_by_lines(source, filename)
    if split is not None:
        return split
    import _ast
    tree = compile(source, filename, "exec", _ast.PyCF_ONLY_AST, dont_inherit=True)
    last = None
    if tree.body and isinstance(tree.body[-1], _ast.Expr):
        last = _ast.Expression(body=tree.body.pop().value)
    body = compile(tree, filename, "exec", dont_inherit=True)
    return [body], (compile(last, filename, "eval", dont_inherit=True) if last else None)


def _new_main(filename):
    import types
    main = types.ModuleType("__main__")
    main.__file__ = filename
    main.__cached__ = None
    main.__builtins__ = __builtins__
    sys.modules["__main__"] = main
    return main


def _exit_code(c):
    if c is None:
        return 0
    if isinstance(c, int):
        return c & 0xFF
    try:
        print(c, file=sys.stderr)
    except BaseException:
        pass
    return 1


def _show_exception(e, filenames):
    """The traceback from the user's first frame on, as python3 prints it."""
    tb = e.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename not in filenames:
        tb = tb.tb_next
    e.__traceback__ = tb
    try:
        if sys.excepthook is sys.__excepthook__:
            # The traceback module reads cells' source from linecache;
            # the built-in hook only from files.
            import traceback
            traceback.print_exception(type(e), e, tb)
        else:
            sys.excepthook(type(e), e, tb)
    except BaseException:
        pass


def run_cell(main, source, filename, filenames):
    """Runs one cell in main's namespace. Returns (status, exit code,
    result bytes or None, truncated)."""
    value = None
    try:
        codes, last = _split(source, filename)
        for code in codes:
            exec(code, main.__dict__)
        if last is not None:
            value = eval(last, main.__dict__)
    except SystemExit as e:
        return "exit", _exit_code(e.code), None, False
    except KeyboardInterrupt as e:
        _show_exception(e, filenames)
        return "interrupted", 130, None, False
    except BaseException as e:
        _show_exception(e, filenames)
        return "error", 1, None, False
    if value is None:
        return "ok", 0, None, False
    main.__dict__["_"] = value
    text, truncated = _text_plain(value)
    return "ok", 0, text, truncated


def _flush():
    ok = True
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except BaseException:
            ok = False
    return ok


def script(argv):
    """A stateless run: /workspace/main.py as python3 runs a script."""
    path = argv[0]
    sys.argv = list(argv)
    sys.path[0] = os.path.dirname(path)
    sys.meta_path.append(_InlineBackend)
    # matplotlib imported before this run (a zygote's preload) read its
    # backend from the environment then, without the run's MPLBACKEND. Named
    # now, it is loaded only if the code plots; a backend pyplot loaded
    # already is switched.
    mpl, want = sys.modules.get("matplotlib"), os.environ.get("MPLBACKEND")
    _note_savefig()
    if mpl is not None and want:
        try:
            plt = sys.modules.get("matplotlib.pyplot")
            if plt is not None and getattr(plt, "_backend_mod", None) is not None:
                plt.switch_backend(want)
            elif dict.get(mpl.rcParams, "backend") != want:  # the raw value: no resolution
                mpl.rcParams["backend"] = want
        except BaseException:
            pass
    result_path = os.path.join(os.path.dirname(path), ".sandboxd-result")
    try:
        with open(path, "rb") as f:
            source = f.read()
    except OSError as e:
        sys.stderr.write("%s: can't open file %r: [Errno %d] %s\n"
                         % (sys.executable, path, e.errno, e.strerror))
        return 2
    main = _new_main(path)
    status, code, text, truncated = run_cell(main, source, path, (path,))
    if status == "interrupted":
        code = -2
    # Before the exit handlers: pyplot's closes every figure.
    try:
        save_figures()
    except BaseException as e:
        _show_exception(e, ())
    t = sys.modules.get("threading")
    if t is not None:
        try:
            t._shutdown()
        except BaseException:
            pass
    try:
        import atexit
        atexit._run_exitfuncs()
    except SystemExit as e:
        code = _exit_code(e.code)
    except BaseException:
        pass
    if text is not None:
        try:
            fd = os.open(result_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write((b"T" if truncated else b"F") + text)
        except OSError:
            pass
    if not _flush() and code == 0:
        code = 120
    return code


# The kernel's frames: 8-byte little-endian length, then JSON. The server
# sends a cell's three descriptors with its frame's first byte.
def _recv_exact(sock, n):
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return buf


def _send(sock, obj):
    import json
    data = json.dumps(obj).encode()
    sock.sendall(len(data).to_bytes(8, "little") + data)


def _cpu_us():
    import resource
    s = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return int((s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime) * 1e6)


def _cpu_limit(seconds):
    """The process's CPU time may grow by at most seconds in this cell
    (RLIMIT_CPU's soft limit: SIGXCPU, which ends the interpreter)."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
    if seconds is None:
        want = hard
    else:
        used = resource.getrusage(resource.RUSAGE_SELF)
        want = int(used.ru_utime + used.ru_stime) + seconds + 1
        if hard != resource.RLIM_INFINITY:
            want = min(want, hard)
    try:
        resource.setrlimit(resource.RLIMIT_CPU, (want, hard))
    except (ValueError, OSError):
        pass


def _to_null():
    """fds 0, 1 and 2 to /dev/null between cells (the call's pipes closed)."""
    null = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)


def kernel():
    # Everything the kernel uses, imported before any cell can put a module
    # of the same name in the workspace (sys.path[0] becomes /workspace).
    import io
    import json
    import linecache
    import resource
    import signal
    import socket
    import traceback
    del resource, traceback  # for _cpu_us, _cpu_limit, _show_exception: in sys.modules now
    ctl = socket.socket(fileno=os.dup(0))  # fd 3: the cells' only extra descriptor
    _to_null()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.argv = ["/workspace/main.py"]
    sys.path[0] = "/workspace"
    sys.meta_path.append(_InlineBackend)
    main = _new_main("/workspace/main.py")
    kernel_pid = os.getpid()
    filenames = set()
    n = 0
    _send(ctl, {"op": "ready"})
    while True:
        try:
            head, fds, _, _ = socket.recv_fds(ctl, 8, 3)
            if len(head) == 0:
                return 0
            if len(head) < 8:
                head += _recv_exact(ctl, 8 - len(head))
            req = json.loads(_recv_exact(ctl, int.from_bytes(head, "little")))
        except (EOFError, OSError, ValueError):
            return 0
        if len(fds) != 3:
            return 3
        n += 1
        for i, fd in enumerate(fds):
            os.dup2(fd, i)
            os.close(fd)
        sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "rb", closefd=False)))
        for k, v in req.get("env", {}).items():
            os.environ[k] = v
        sys.argv = ["/workspace/main.py"] + list(req.get("args", []))
        filename = "<cell-%d>" % n
        source = req.get("code", "")
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        filenames.add(filename)
        cpu0 = _cpu_us()
        _cpu_limit(req.get("cpu_s"))
        status, code, text, truncated = "error", 1, None, False
        try:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            try:
                status, code, text, truncated = run_cell(main, source, filename, filenames)
                if os.getpid() != kernel_pid:
                    # A process the cell forked came to the cell's end: it
                    # ends there, as a forked script's child does, and never
                    # serves cells itself.
                    _flush()
                    os._exit(code)
                save_figures()
            finally:
                signal.signal(signal.SIGINT, signal.SIG_IGN)
        except KeyboardInterrupt as e:
            _show_exception(e, filenames)
            status, code = "interrupted", 130
        except BaseException as e:
            _show_exception(e, ())
        _cpu_limit(None)
        _flush()
        _to_null()
        reply = {"op": "done", "seq": req.get("seq"), "status": status, "exit_code": code,
                 "cpu_us": _cpu_us() - cpu0, "truncated": truncated}
        if text is not None:
            reply["result"] = text.decode("utf-8", "replace")
        try:
            _send(ctl, reply)
        except OSError:
            return 0


def _main():
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode == "script" and len(sys.argv) > 2:
        code = script(sys.argv[2:])
        if code == -2:  # as python3 ends on an uncaught KeyboardInterrupt
            import signal
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        return code
    if mode == "kernel":
        return kernel()
    sys.stderr.write("sandboxd_cell: usage: script PATH [ARGS...] | kernel\n")
    return 2


def main():
    sys.exit(_main())
