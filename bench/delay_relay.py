"""A TCP relay that adds a fixed delay each way: what it reads from one side
is written to the other `delay` seconds later (a connection's setup waits a
round trip).  bench/remote_link.py puts one in front of the S3 server when
the kernel has no netem qdisc to delay packets; the rate is capped by tbf on
the link either way.

    python delay_relay.py LISTEN_HOST LISTEN_PORT UPSTREAM_HOST UPSTREAM_PORT DELAY_S
"""
import asyncio
import sys


async def pipe(reader, writer, delay):
    loop = asyncio.get_running_loop()
    q = asyncio.Queue()

    async def take():
        try:
            while True:
                data = await reader.read(1 << 18)
                await q.put((loop.time() + delay, data))
                if not data:
                    return
        except (ConnectionError, OSError):
            await q.put((loop.time(), b""))

    async def give():
        try:
            while True:
                due, data = await q.get()
                wait = due - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                if not data:
                    if writer.can_write_eof():
                        writer.write_eof()
                    return
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass

    await asyncio.gather(take(), give())


async def serve(up_host, up_port, delay, reader, writer):
    await asyncio.sleep(2 * delay)  # the handshake's round trip
    try:
        ur, uw = await asyncio.open_connection(up_host, up_port)
    except OSError:
        writer.close()
        return
    await asyncio.gather(pipe(reader, uw, delay), pipe(ur, writer, delay))
    for w in (writer, uw):
        w.close()


async def main():
    host, port, up_host, up_port, delay = sys.argv[1:6]
    server = await asyncio.start_server(
        lambda r, w: serve(up_host, int(up_port), float(delay), r, w), host, int(port),
        backlog=256)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
