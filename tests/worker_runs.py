"""Starting a worker that is expected to refuse or to stop by itself, for tests on a broker and
on the scripted one."""

from __future__ import annotations

import asyncio
import threading

from rabbitry.consumer import AsyncWorker, Worker


def start_async(worker: AsyncWorker) -> BaseException | None:
    """Run the worker until it returns (it refuses at once) or 10 s passed; its error."""

    async def main() -> BaseException | None:
        try:
            async with asyncio.timeout(10):
                await worker.run()
        except Exception as exc:
            return exc
        return None

    return asyncio.run(main())


def start_blocking(worker: Worker) -> tuple[threading.Thread, list[BaseException]]:
    """Run the blocking ``worker`` in a thread of its own (a daemon, started); the thread, and
    the list its error is put in once ``run`` raises one."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            worker.run()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, errors
