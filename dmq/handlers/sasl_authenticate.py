"""SaslAuthenticate (36): one SASL token of the exchange SaslHandshake started, and the
server's answer. A failure is SASL_AUTHENTICATION_FAILED with Kafka's message and closes
the connection; success (v1+) says the session's lifetime (connections.max.reauth.ms,
KIP-368), before which the client re-authenticates on the same connection."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from dmq.handlers.context import BrokerServices, RequestContext
from dmq.protocol.codec import make

API_KEY = 36
MIN_VERSION = 0
MAX_VERSION = 2


async def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    if ctx.auth is None:
        return make(ctx.schema.SaslAuthenticateResponse, error_code=ErrorCode.illegal_sasl_state,
                    error_message="SASL is not enabled on this listener", auth_bytes=b"",
                    session_lifetime=timedelta(0))
    error, message, token, lifetime_ms = await ctx.auth.authenticate(
        bytes(request.auth_bytes), int(time.monotonic() * 1000))
    return make(ctx.schema.SaslAuthenticateResponse, error_code=ErrorCode[error],
                error_message=message, auth_bytes=token,
                session_lifetime=timedelta(milliseconds=lifetime_ms))
