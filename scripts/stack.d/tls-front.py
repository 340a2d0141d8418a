#!/usr/bin/env python3
"""A TLS front for a plain-text TCP server (the stack's MinIO serves either TLS or plain text on
a port, and the plain endpoint stays).

    tls-front.py LISTEN_HOST:PORT BACKEND_HOST:PORT CERT_PEM KEY_PEM

Terminates TLS (1.2+, the stack's test-CA certificate) and copies bytes both ways, one backend
connection per client connection. HTTP is not parsed: signatures (SigV4 signs the Host header,
which names the front's port) pass through untouched, and MinIO checks them against the Host
header it receives, whatever port it listens on.
"""
import asyncio
import ssl
import sys


async def pump(reader, writer):
    try:
        while True:
            chunk = await reader.read(65536)
            if not chunk:
                break
            writer.write(chunk)
            await writer.drain()
    except (ConnectionError, ssl.SSLError, asyncio.IncompleteReadError):
        pass
    finally:
        try:
            writer.close()
        except Exception:
            pass


async def main():
    listen, backend, cert, key = sys.argv[1:5]
    lhost, lport = listen.rsplit(":", 1)
    bhost, bport = backend.rsplit(":", 1)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert, key)

    async def client(creader, cwriter):
        try:
            breader, bwriter = await asyncio.open_connection(bhost, int(bport))
        except OSError:
            cwriter.close()
            return
        await asyncio.gather(pump(creader, bwriter), pump(breader, cwriter))

    server = await asyncio.start_server(client, lhost, int(lport), ssl=ctx, reuse_address=True)
    print(f"tls-front: https on {listen} -> {backend}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
