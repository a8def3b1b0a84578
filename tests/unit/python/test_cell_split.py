"""sandboxd_cell's split of a run's code into its statements and the last
expression (server/sandbox/sandboxd_cell.py, _split): the split by lines,
which spares the syntax tree on the cold path, must give exactly what the
whole parse gives (the same result value, the same names bound, the same
error at the same line) for every source, and must be the one taken for the
common endings (a call, a print, a loop, an assignment), or the saving is
gone. A differential test over a corpus of tricky endings and over random
programs put together from pieces that trip line-based splitting: strings
over several lines, brackets, backslash joins, ';', comments, form feeds,
CRLF, decorators."""
import importlib.util
import os
import random
import re
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "..", "..", "..", "server", "sandbox", "sandboxd_cell.py")
_spec = importlib.util.spec_from_file_location("sandboxd_cell_under_test", SRC)
cell = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cell)


def whole_parse(source, filename):
    """The split by the syntax tree alone (the path the line split falls
    back to)."""
    saved = cell._split_by_lines
    cell._split_by_lines = lambda *a: None
    try:
        return cell._split(source, filename)
    finally:
        cell._split_by_lines = saved


def outcome(split, source, filename="<cell>"):
    """What running the code gives: the last expression's value, the
    names bound, or the error and its line."""
    ns = {"__name__": "__main__", "__builtins__": __builtins__}
    try:
        codes, last = split(source, filename)
        for code in codes:
            exec(code, ns)
        value = eval(last, ns) if last is not None else None
    except Exception as e:  # noqa: BLE001: the error is the outcome
        tb, line = e.__traceback__, getattr(e, "lineno", None)
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == filename:
                line = tb.tb_lineno
            tb = tb.tb_next
        return ("error", type(e).__name__, line)
    names = {k: repr(v) for k, v in ns.items()
             if k not in ("__builtins__",) and not callable(v)}
    return ("ok", re.sub(r" at 0x[0-9a-f]+", "", repr(value)), sorted(names.items()))


CORPUS = [
    'print("hello")\n',
    'x = 1\nx + 1\n',
    'x = 1\nx + 1',
    'x = 1\n',
    '1 + 1\n\n\n# trailing comment\n',
    'def f():\n    return 3\nf()\n',
    'def f():\n    return 3\n\nf\n',
    'for i in range(3):\n    i\n',
    'for i in range(3): i; i + 1\n',
    'if True: a = 1; a\n',
    'a = 1; a\n',
    'a = 1; a + 1; b = 2\n',
    'a = (1,\n2)\n',
    'f = lambda: 4\nf(\n)\n',
    'x = [1,\n2,\n3]\nlen(x\n)\n',
    's = """\nprint(1)\n"""\n',
    's = """\nx\n"""\ns\n',
    's = """\n"""; 5\n',
    'x = 1 + \\\n2\n',
    'x = 1\n\\\nx * 7\n',
    'x = 1\n\\\n  x * 7\n',
    'x = 2\n\x0cx * 3\n',
    'x = 2\r\nx * 3\r\n',
    'x = 2\rx * 3\r',
    '@staticmethod\ndef g(): return 1\n',
    'import os\nos.sep\n',
    'import os; os.sep\n',
    'class A:\n    pass\nA.__name__\n',
    'try:\n    1 / 0\nexcept ZeroDivisionError:\n    r = "caught"\nr\n',
    'try:\n    1 / 0\nexcept ZeroDivisionError:\n    r = "caught"\n',
    'while False:\n    pass\nelse:\n    w = 1\n',
    'with open(__file__ if False else "/dev/null") as f: f.read()\n',
    'x = 1\nif x:\n    x\nelse:\n    -x\n',
    '1 / 0\n',
    'x = 1\n(1 /\n0)\n',
    'x = (\n1 / 0)\n',
    'def broken(:\n    pass\n',
    'x = 1\n)\n',
    'x = """unterminated\n',
    '',
    '\n\n',
    '# only a comment\n',
    '"a docstring"\n',
    '"a docstring"\nx = 1\n',
    '"a"\n"b"\n',
    'x = 1 # f()\n',
    'x = 1 # c\u2028f()\n',
    'x = "\u2028"\nlen(x)\n',
    'match = 1; match\n',
    'match = 3\nmatch\n',
    'match 1:\n    case 1: m = "one"\n',
    'async def h(): pass\nh.__name__\n',
    'from __future__ import annotations\ndef k(a: int): pass\nk.__annotations__\n',
    '# -*- coding: latin-1 -*-\nx = 1\nx\n',
    'x = 1\nx if x else 2\n',
    'x = 1\nnot x\n',
    'del_me = 1\ndel del_me\n',
    'assert True; 7\n',
    'global g9\ng9 = 1\n',
    'x = {1: 2,\n}\nx[\n1]\n',
    '\tx = 1\n',
    ' x = 1\n',
]


@pytest.mark.parametrize("source", CORPUS)
def test_corpus_same_as_the_whole_parse(source):
    for src in (source, source.encode()):
        assert outcome(cell._split, src) == outcome(whole_parse, src), repr(src)


@pytest.mark.parametrize("source", [
    'print("hello")\n',
    'import os\nx = 1\nprint(x)\n',
    'x = 1\nx + 1\n',
    'for i in range(3):\n    print(i)\n',
    'x = [i for i in range(3)]\n',
    'import matplotlib\nfig.savefig("output/plot.png")\nplt.close(fig)\n',
    'def main():\n    return 0\n\nif __name__ == "__main__":\n    main()\n',
    'x = 2\r\nprint(x)\r\n',
])
def test_common_endings_take_the_line_split(source):
    for src in (source, source.encode()):
        assert cell._split_by_lines(src, "<cell>") is not None, repr(src)


PIECES = [
    "a = 1", "b = a + 1", "a", "b * 2", "print(a)", "len([a,\nb])", "(a +\n b)",
    's = """x\ny = 2\n"""', "s", "t = 'q'; a", "a; b = 3", "c = 1 + \\\n2", "c",
    "for i in range(2):\n    a\n    i; b = i", "if a:\n    z = 1\nelse:\n    z = 2", "z",
    "def f(x):\n    return x\n", "f(\n4\n)", "# note", "", "\x0ca", "\\\na",
    "@(lambda g: g)\ndef d(): return 5", "d()", "[a,\n]", "{\n}", "1 / 0", "(1 /\n0)",
    "x = '''\nf()\n'''", "x", "try:\n    a\nexcept Exception:\n    pass",
]


def test_random_programs_same_as_the_whole_parse():
    rng = random.Random(int(os.environ.get("SBX_SPLIT_SEED", "2718")))
    taken = 0
    for _ in range(3000):
        parts = [rng.choice(PIECES) for _ in range(rng.randint(1, 5))]
        sep = rng.choice(["\n", "\r\n", "\n\n", "\n# c\n"])
        src = sep.join(p.replace("\n", sep) for p in parts) + rng.choice(["", "\n", sep])
        if rng.random() < 0.3:
            src = src.encode()
        if cell._split_by_lines(src, "<cell>") is not None:
            taken += 1
        assert outcome(cell._split, src) == outcome(whole_parse, src), repr(src)
    assert taken > 1500, f"the line split was taken for only {taken} of 3000 programs"


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
