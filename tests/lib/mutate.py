"""The driver the mutation scripts share (tests/clients/c/mutations.py,
tests/integration/service/tls_mutations.py, streaming_mutations.py): each mutation replaces one
text in one source file, rebuilds build/, runs the tests said to guard it
and prints CAUGHT when they fail as they must, MISSED when they pass
anyway. The source is restored (also after an error) and rebuilt at the
end. Not run by ctest: as root, after ./scripts/build."""
import os
import subprocess


def build(root):
    b = subprocess.run(["cmake", "--build", "build", "-j2"], cwd=root, capture_output=True,
                       text=True)
    if b.returncode != 0:
        raise RuntimeError(f"build failed: {b.stdout[-1500:]}")


def run_mutations(root, mutations, run_guard, only=()):
    """mutations: name -> (file under root, old text, new text, guards
    separated by spaces); run_guard(guard) -> (failed, detail lines)."""
    for name, (f, a, b, guards) in mutations.items():
        if only and not any(o in name for o in only):
            continue
        path = os.path.join(root, f)
        with open(path) as fh:
            src = fh.read()
        assert src.count(a) == 1, (name, src.count(a))
        try:
            with open(path, "w") as fh:
                fh.write(src.replace(a, b))
            build(root)
            for g in guards.split():
                failed, detail = run_guard(g)
                print(f"{'CAUGHT' if failed else 'MISSED':7} {name} by {g}", flush=True)
                if os.environ.get("SHOW"):
                    print("    " + "\n    ".join(detail))
        finally:
            with open(path, "w") as fh:
                fh.write(src)
    build(root)


def run_pytest_group(test_file, group, bin_dir):
    """A guard that is one end-to-end test (FILE::test_GROUP, as ctest runs
    it): (failed, its first failed checks)."""
    p = subprocess.run(["/usr/bin/python3", "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        f"{test_file}::test_{group}", "--bin-dir", bin_dir],
                       capture_output=True, text=True, timeout=600)
    if p.returncode not in (0, 1):
        raise RuntimeError(f"pytest exited {p.returncode}: {p.stdout[-800:]}")
    return p.returncode == 1, [l for l in p.stdout.splitlines() if l.startswith("FAIL")][:4]
