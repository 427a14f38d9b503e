"""Which module this package needs, and what a `MODULE LIST` reply says of it.

The rule: a client x.y.* needs the module x.y.0 or newer. The module reports
its version in `MODULE LIST` as `ver` = major*10000 + minor*100 + patch
(0.4.0 is 400); builds before 0.4.0 reported 1. Each `Locks` (sync and
asyncio) asks once, on a connection of its own bounded by
`MODULE_CHECK_TIMEOUT`, before its first command (`Locks._check_module`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._errors import ModuleVersionError

__version__ = "0.4.0"

_major, _minor, _patch = (int(part) for part in __version__.split("."))
REQUIRED_MODULE_VERSION = _major * 10000 + _minor * 100
"""The oldest module this package works with, as `MODULE LIST` numbers it:
x.y.0 for this package's x.y.* (0.4.0: 400)."""

MODULE_CHECK_TIMEOUT = 5.0
"""Seconds the check may take to connect and to read `MODULE LIST`'s reply
before it raises the client library's TimeoutError: a server that does not
answer this does not answer the lock commands either."""


def _text(value: object) -> str | None:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value if isinstance(value, str) else None


def lock_module_in(reply: object) -> tuple[bool, int | None]:
    """`(readable, ver)` from a `MODULE LIST` reply: `ver` is the `lock`
    module's, None when it is not loaded; `readable` is False when the reply
    is not one (then nothing is decided). RESP2 lists each module as a flat
    list of names and values, RESP3 (and redis-py's callback) as a dict."""
    if not isinstance(reply, list | tuple):
        return False, None
    for module in reply:
        fields: dict[str | None, Any]
        if isinstance(module, Mapping):
            fields = {_text(k): v for k, v in module.items()}
        elif isinstance(module, list | tuple):
            fields = {_text(k): v for k, v in zip(module[::2], module[1::2], strict=False)}
        else:
            return False, None
        if _text(fields.get("name")) != "lock":
            continue
        ver = fields.get("ver")
        if isinstance(ver, bytes | str):
            ver = _text(ver)
            if ver is None or not ver.isdigit():
                return False, None
            return True, int(ver)
        if isinstance(ver, int) and not isinstance(ver, bool):
            return True, ver
        return False, None
    return True, None


def shown(ver: int) -> str:
    """`ver` as a version: 400 is `0.4.0 (ver 400)`; below 400 (builds before
    0.4.0 all said 1), older than 0.4.0, whatever it was."""
    if ver < 400:
        return f"older than 0.4.0 (ver {ver})"
    return f"{dotted(ver)} (ver {ver})"


def dotted(ver: int) -> str:
    return f"{ver // 10000}.{ver // 100 % 100}.{ver % 100}"


def check(reply: object) -> None:
    """Raises `ModuleVersionError` when the `MODULE LIST` reply shows no `lock`
    module, or one older than `REQUIRED_MODULE_VERSION`."""
    readable, found = lock_module_in(reply)
    if readable and (found is None or found < REQUIRED_MODULE_VERSION):
        raise ModuleVersionError(found, REQUIRED_MODULE_VERSION, refusal(found))


def refusal(found: int | None) -> str:
    """The refusal's message: both versions, and what to do."""
    needed = dotted(REQUIRED_MODULE_VERSION)
    client = f"redis-lock-client {__version__}"
    if found is None:
        return (
            f"the server has no lock module loaded (not in MODULE LIST), and {client} "
            f"needs the module {needed} or newer: load it "
            "(redis-server --loadmodule /path/to/libredis_lock.so)"
        )
    return (
        f"the server's lock module is {shown(found)} but {client} needs the module "
        f"{needed} or newer: upgrade the module on the server, or use a client as old "
        "as the module"
    )
