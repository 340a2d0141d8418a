#!/usr/bin/env python3
"""The stack's SMTP server (component `smtp`): aiosmtpd in server mode, for ClueCDC's e-mail alert
channel tests. One port speaks STARTTLS (required before AUTH and MAIL), one implicit TLS; both
require AUTH (PLAIN or LOGIN) with the fixture user. Each accepted message is stored as one JSON
file in the mailbox directory: {at, port, tls, tls_version, auth_user, mail_from, rcpt_tos, data}.

Usage: smtp-server.py HOST STARTTLS_PORT IMPLICIT_PORT CERT KEY USER PASSWORD MAILBOX_DIR
"""
import asyncio
import json
import os
import ssl
import sys
import time
import uuid

from aiosmtpd.smtp import SMTP, AuthResult, LoginPassword

host, starttls_port, implicit_port, cert, key, user, password, mailbox = sys.argv[1:9]
os.makedirs(mailbox, exist_ok=True)


def context():
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    return ctx


class Mailbox:
    def __init__(self, port):
        self.port = port

    async def handle_DATA(self, server, session, envelope):
        tls = server.transport.get_extra_info("ssl_object")
        record = {
            "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "port": self.port,
            "tls": tls is not None,
            "tls_version": tls.version() if tls is not None else None,
            "auth_user": session.auth_data.login.decode() if isinstance(session.auth_data, LoginPassword) else None,
            "mail_from": envelope.mail_from,
            "rcpt_tos": envelope.rcpt_tos,
            "data": envelope.content.decode("utf-8", "replace"),
        }
        name = f"{time.time_ns()}-{uuid.uuid4().hex[:8]}.json"
        tmp = os.path.join(mailbox, "." + name)
        with open(tmp, "w") as f:
            json.dump(record, f)
        os.replace(tmp, os.path.join(mailbox, name))
        print(f"smtp: stored {name} from {envelope.mail_from} to {envelope.rcpt_tos} (tls {record['tls_version']})", flush=True)
        return "250 Message accepted for delivery"


def authenticator(server, session, envelope, mechanism, auth_data):
    ok = (
        isinstance(auth_data, LoginPassword)
        and auth_data.login.decode() == user
        and auth_data.password.decode() == password
    )
    if not ok:
        print(f"smtp: refused AUTH {mechanism}", flush=True)
    return AuthResult(success=ok, handled=False, auth_data=auth_data)


async def main():
    loop = asyncio.get_running_loop()
    ctx = context()
    plain = await loop.create_server(
        lambda: SMTP(
            Mailbox(int(starttls_port)),
            hostname="localhost",
            tls_context=ctx,
            require_starttls=True,
            auth_required=True,
            auth_require_tls=True,
            authenticator=authenticator,
        ),
        host,
        int(starttls_port),
    )
    wrapped = await loop.create_server(
        lambda: SMTP(
            Mailbox(int(implicit_port)),
            hostname="localhost",
            auth_required=True,
            auth_require_tls=False,  # the whole connection is TLS already
            authenticator=authenticator,
        ),
        host,
        int(implicit_port),
        ssl=ctx,
    )
    print(f"smtp: STARTTLS on {host}:{starttls_port}, implicit TLS on {host}:{implicit_port}, mailbox {mailbox}", flush=True)
    async with plain, wrapped:
        await asyncio.gather(plain.serve_forever(), wrapped.serve_forever())


asyncio.run(main())
