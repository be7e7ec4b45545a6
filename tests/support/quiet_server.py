"""The stdlib threading HTTP server for test peers, quiet about clients that hang up.

A client that goes away mid-answer is the exporter doing its job (a deadline, a stop); the stdlib prints
a traceback for it, which a passing run should not show (issue 29, point 14). Anything else still prints.
"""

from __future__ import annotations

import sys
from http.server import ThreadingHTTPServer
from typing import Any


class QuietHTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], BrokenPipeError | ConnectionResetError):
            super().handle_error(request, client_address)
