"""_credential.py: the API key every call of a client carries, in
RequestEnvelope.credential, for a server with --tenants (docs/CLIENTS.md,
"API keys").

The key comes from the constructor's api_key, else $SANDBOX_API_KEY (which,
unlike a command-line flag, ps does not show). It is checked here as the C
library checks it (sbxc_client_set_api_key): at most 512 bytes of printable
ASCII, no spaces, so a key with a stray newline fails at once and locally
instead of as UNAUTHENTICATED from every server.

Never put the key in a message, a repr or a log: the errors below say which
rule it breaks and where, not what it is, and Credential's repr hides it.
"""
from __future__ import annotations

import os
from typing import Mapping, Optional

API_KEY_MAX = 512  # bytes, as SBXC_API_KEY_MAX and the server's cap
ENV_VAR = "SANDBOX_API_KEY"
RULE = f"at most {API_KEY_MAX} bytes of printable ASCII without spaces"


class Credential:
    """An API key (or none: ""), which no repr, str or pickle shows."""

    __slots__ = ("_key",)

    def __init__(self, key: str):
        self._key = key

    @property
    def key(self) -> str:
        return self._key

    def __bool__(self) -> bool:
        return bool(self._key)

    def __repr__(self) -> str:
        return "Credential(<set>)" if self._key else "Credential(<none>)"

    __str__ = __repr__

    def __reduce__(self):
        raise TypeError("a sandboxd credential is not pickled")


def check_api_key(key: str, source: str = "api_key") -> None:
    """Raises ValueError naming the rule key breaks (never the key)."""
    n = len(key)
    if n > API_KEY_MAX:  # every character is at least one byte
        raise ValueError(f"{source}: an API key is {RULE}; this one has {n} characters")
    for i, ch in enumerate(key):
        if not 0x21 <= ord(ch) <= 0x7E:
            raise ValueError(f"{source}: an API key is {RULE}; character {i + 1} of {n} is a "
                             "space, a control character or not ASCII")


def credential_from(api_key: Optional[str],
                    environ: Optional[Mapping[str, str]] = None) -> Credential:
    """The credential a client sends: api_key; when it is None,
    $SANDBOX_API_KEY; "" (or an empty variable) sends none."""
    source = "api_key"
    if api_key is None:
        api_key = (os.environ if environ is None else environ).get(ENV_VAR, "")
        source = f"${ENV_VAR}"
    if not isinstance(api_key, str):
        raise TypeError(f"api_key: a str or None, not {type(api_key).__name__}")
    check_api_key(api_key, source)
    return Credential(api_key)
