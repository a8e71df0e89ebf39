"""A room's shared Wi-Fi in user space: a TCP proxy in front of a server whose every connection shares one link of
`rate_mbit` megabits per second each way, each chunk delivered `delay_ms` later (what `tc qdisc … netem rate …
delay …` does on a machine whose kernel has netem; on one without it this stands in).

    link = SlowLink("127.0.0.1", 8501, rate_mbit=20, delay_ms=20)
    port = await link.start()   # learners connect to 127.0.0.1:port
    ...
    await link.stop()

Each direction is one queue for the whole room: a chunk leaves when the link has sent everything queued before it
(bytes × 8 / rate), and arrives delay_ms after that, so twenty learners fetching at once wait for each other as
they would on one access point.
"""
from __future__ import annotations

import asyncio
import contextlib

CHUNK = 16 * 1024  # bytes read at a time: the link's granularity


class _Direction:
    """One way of the shared link: when it is next free (loop time)."""

    def __init__(self, rate_mbit: float) -> None:
        self.seconds_per_byte = 8.0 / (rate_mbit * 1e6)
        self.free_at = 0.0

    def departure(self, now: float, n: int) -> float:
        """When a chunk of n bytes queued now has left the link."""
        self.free_at = max(self.free_at, now) + n * self.seconds_per_byte
        return self.free_at


class SlowLink:
    def __init__(self, host: str, port: int, *, rate_mbit: float, delay_ms: float) -> None:
        self.target = (host, port)
        self.delay = delay_ms / 1000.0
        self.down, self.up = _Direction(rate_mbit), _Direction(rate_mbit)
        self.server: asyncio.base_events.Server | None = None
        self.tasks: set[asyncio.Task] = set()

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
        for task in list(self.tasks):
            task.cancel()
        for task in list(self.tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _accept(self, client_r, client_w) -> None:
        try:
            server_r, server_w = await asyncio.open_connection(*self.target)
        except OSError:
            client_w.close()
            return
        for args in ((client_r, server_w, self.up), (server_r, client_w, self.down)):
            task = asyncio.create_task(self._pipe(*args))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def _pipe(self, reader, writer, link: _Direction) -> None:
        """Read chunks as they come; deliver each one when the link has carried it, plus the delay, in order."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()

        async def deliver():
            while (item := await queue.get()) is not None:
                at, data = item
                await asyncio.sleep(max(0.0, at - loop.time()))
                writer.write(data)
                await writer.drain()

        sender = asyncio.create_task(deliver())
        try:
            while data := await reader.read(CHUNK):
                queue.put_nowait((link.departure(loop.time(), len(data)) + self.delay, data))
            queue.put_nowait(None)
            await sender
        except (ConnectionError, asyncio.CancelledError):
            sender.cancel()
        finally:
            with contextlib.suppress(Exception):
                writer.close()
