"""The HTTP server of a node's dashboard and Prometheus endpoint: aiohttp's, on an event loop of its own, so that
an idle or slow connection costs a descriptor and a coroutine, never a thread, and is bounded in number and time.

The standard library's threading server (and prometheus_client's, which is one) gave each connection a thread
that waited for its request with no time limit: 300 connections that sent `GET / HT` and stopped held 311
threads and 312 descriptors until the client left (issue 54, 5). Here:
- a connection is closed IDLE_SECONDS after it opened, or after its last answer, unless a whole request came
  (aiohttp's keep-alive timer runs from the connection's start, and covers a request left half-sent);
- at most MAX_CONNECTIONS are open at once: when one more is accepted, the oldest open one is closed (counted
  in `evicted`), so a crowd of connections that never finish their request cannot keep a viewer out (a
  viewer's request is answered within milliseconds of its connection, long before MAX_CONNECTIONS newer ones);
- request lines and headers are bounded (MAX_LINE bytes), and only GET of the routes given is answered.
"""
from __future__ import annotations

import asyncio
import collections
import threading
from collections.abc import Callable

IDLE_SECONDS = 10.0  # a connection without a complete request, or idle after an answer, is closed then
MAX_CONNECTIONS = 64  # connections open at once (a dashboard tab holds one or two)
MAX_LINE = 8190  # bytes of a request line or header field

Route = Callable[[], tuple[str, bytes]]  # -> (content type, body)


class HttpServer:
    def __init__(self, routes: dict[str, Route], host: str, port: int, name: str,
                 headers: dict[str, str] | None = None):
        """Serves GET of `routes` (path -> a function giving content type and body) on host:port (0: any free
        port; `self.port` is the one bound) from a daemon thread named `name`; `headers` go with every answer."""
        from aiohttp import web

        self.routes, self.headers, self.evicted = routes, dict(headers or {}), 0
        self.loop = asyncio.new_event_loop()

        async def start():  # (aiohttp's server is made inside its loop)
            self._handlers = web.Server(self._handle, keepalive_timeout=IDLE_SECONDS, max_line_size=MAX_LINE,
                                        max_field_size=MAX_LINE, access_log=None)
            return await self.loop.create_server(self._connection, host, port)

        self._open: collections.OrderedDict = collections.OrderedDict()  # handlers of open connections, oldest
        self._server = self.loop.run_until_complete(start())  #                first (what MAX_CONNECTIONS counts)
        self._server_lost, self._handlers.connection_lost = self._handlers.connection_lost, self._lost
        self.port = self._server.sockets[0].getsockname()[1]
        self.thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self.thread.start()

    def _connection(self):
        """A new connection's handler; the oldest open connection closed first when MAX_CONNECTIONS are."""
        while len(self._open) >= MAX_CONNECTIONS:
            oldest, _ = self._open.popitem(last=False)
            oldest.force_close()
            self.evicted += 1
        handler = self._handlers()
        self._open[handler] = None
        return handler

    def _lost(self, handler, exc=None) -> None:
        self._open.pop(handler, None)
        self._server_lost(handler, exc)

    @property
    def connections(self) -> int:
        """Connections open now (accepted, and neither closed by us nor lost)."""
        return len(self._open)

    async def _handle(self, request):
        from aiohttp import web

        route = self.routes.get(request.path) if request.method == "GET" else None
        if route is None:
            return web.Response(status=404 if request.method == "GET" else 405, text="not found",
                                headers=self.headers)
        kind, body = route()
        return web.Response(body=body, headers={**self.headers, "Content-Type": kind})

    def close(self) -> None:
        async def stop() -> None:
            self._server.close()
            await self._handlers.shutdown(1.0)

        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        if not self.thread.is_alive():
            self.loop.close()
