"""SaslHandshake (17): the client picks a SASL mechanism. v1: the tokens follow in
SaslAuthenticate requests; v0 (Kafka before 1.0): they follow as raw size-prefixed
frames without a request header, which the broker's dispatcher exchanges
(``ConnectionAuth.raw``). Clients probe v0 to know SASL is there (librdkafka's feature
check), so both are advertised. On a listener without
SASL the answer is ILLEGAL_SASL_STATE, as Kafka's; an unknown mechanism is
UNSUPPORTED_SASL_MECHANISM with the enabled ones and the connection is closed."""

from __future__ import annotations

import time
from typing import Any

from kio.schema.errors import ErrorCode

from dmq.handlers.context import BrokerServices, RequestContext
from dmq.protocol.codec import make

API_KEY = 17
MIN_VERSION = 0
MAX_VERSION = 1


async def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    if ctx.auth is None:
        return make(ctx.schema.SaslHandshakeResponse, error_code=ErrorCode.illegal_sasl_state,
                    mechanisms=())
    error, mechanisms = ctx.auth.handshake(request.mechanism, int(time.monotonic() * 1000))
    if error == "none" and ctx.api_version == 0:
        ctx.auth.raw = True
    return make(ctx.schema.SaslHandshakeResponse, error_code=ErrorCode[error],
                mechanisms=tuple(mechanisms))
