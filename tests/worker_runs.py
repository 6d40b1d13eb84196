"""Starting a worker that is expected to refuse, for tests on a broker and on the scripted one."""

from __future__ import annotations

import asyncio

from rabbitry.consumer import AsyncWorker


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
