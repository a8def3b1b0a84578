"""Tiny pure-Python wheels written directly as zip files, for offline tests
and the requirements benchmark: a .whl is a zip holding the package's files
and <dist>-<version>.dist-info/{METADATA,WHEEL,RECORD} (PEP 427)."""
import base64
import hashlib
import os
import zipfile


def _record_line(path, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}\n"


def make_wheel(wheelhouse, name, version, files, requires=()):
    """Writes <name>-<version>-py3-none-any.whl into wheelhouse; files maps
    paths inside the wheel (e.g. "pkg/__init__.py") to text or bytes.
    Returns the wheel's path."""
    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    members = {path: (data.encode() if isinstance(data, str) else data)
               for path, data in files.items()}
    members[f"{info}/METADATA"] = (
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        + "".join(f"Requires-Dist: {r}\n" for r in requires)).encode()
    members[f"{info}/WHEEL"] = (b"Wheel-Version: 1.0\nGenerator: sandboxd-tests\n"
                                b"Root-Is-Purelib: true\nTag: py3-none-any\n")
    record = "".join(_record_line(p, d) for p, d in members.items()) + f"{info}/RECORD,,\n"
    path = os.path.join(wheelhouse, f"{dist}-{version}-py3-none-any.whl")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for p, d in members.items():
            z.writestr(p, d)
        z.writestr(f"{info}/RECORD", record)
    return path


def make_module_wheel(wheelhouse, name, version, value=None, requires=(), padding=0):
    """A wheel whose package <name> (dashes as underscores) has VALUE and
    VERSION, and padding bytes of incompressible data (to give it a size)."""
    mod = name.replace("-", "_")
    files = {f"{mod}/__init__.py": f"VERSION = {version!r}\nVALUE = {value!r}\n"}
    if padding:
        files[f"{mod}/padding.bin"] = os.urandom(padding)
    return make_wheel(wheelhouse, name, version, files, requires)
