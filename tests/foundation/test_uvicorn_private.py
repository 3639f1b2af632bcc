"""adapter/server.py's TLSHttpProtocol subclasses uvicorn's private HttpToolsProtocol (uvicorn has
no supported way to hand the client certificate to the app). The lock pins uvicorn exactly; these
tests fail when the installed uvicorn is not the locked one, or when the private shape the subclass
leans on moves, so an upgrade is a decision someone checks, not a surprise in an image.

When one fails after an upgrade: read uvicorn's protocols/http/httptools_impl.py, adjust
TLSHttpProtocol (or drop it, if uvicorn now puts the TLS extension in the scope itself), run
tests/adapter/test_serve_writes.py and test_serve_https.py, then update the checks below.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import uvicorn
from uvicorn.protocols.http import httptools_impl

from adapter.server import TLSHttpProtocol

ROOT = Path(__file__).resolve().parents[2]
LOCKS = [ROOT / "requirements" / "app.txt", ROOT / "requirements" / "dev.txt"]


def _locked(package: str, lock: Path) -> str:
    m = re.search(rf"^{re.escape(package)}==([^\s\\;]+)", lock.read_text(), re.MULTILINE)
    assert m, f"{lock.relative_to(ROOT)} does not pin {package}: regenerate it (its header has the command)"
    return m.group(1)


def _params(fn) -> list[str]:
    return list(inspect.signature(fn).parameters)


def test_the_installed_uvicorn_is_the_one_both_locks_pin():
    assert {_locked("uvicorn", lock) for lock in LOCKS} == {uvicorn.__version__}, (
        f"uvicorn {uvicorn.__version__} is installed; the locks pin {[_locked('uvicorn', lk) for lk in LOCKS]}")


def test_the_private_protocol_still_has_the_hooks_the_subclass_overrides():
    base = httptools_impl.HttpToolsProtocol
    assert issubclass(TLSHttpProtocol, base)
    assert _params(base.connection_made) == ["self", "transport"]
    assert _params(base.on_headers_complete) == ["self"]
    assert _params(base.on_message_begin) == ["self"]
    # on_message_begin builds a fresh scope dict per request: the subclass adds its extension after it
    assert re.search(r"self\.scope\s*=\s*\{", inspect.getsource(base.on_message_begin))
    # on_headers_complete makes the request's cycle: the subclass wraps that cycle's transport
    assert "self.cycle = RequestResponseCycle(" in inspect.getsource(base.on_headers_complete)


def test_the_response_cycle_still_writes_through_its_transport_attribute():
    cycle = httptools_impl.RequestResponseCycle
    assert "transport" in _params(cycle.__init__)
    assert "self.transport = transport" in inspect.getsource(cycle.__init__)
    assert "self.transport.write(" in inspect.getsource(cycle.send)


def test_uvicorn_does_not_yet_put_the_tls_extension_in_the_scope_itself():
    # If this fails, uvicorn passes the client certificate on its own: prefer it to the subclass.
    assert '"tls"' not in inspect.getsource(httptools_impl.HttpToolsProtocol)
