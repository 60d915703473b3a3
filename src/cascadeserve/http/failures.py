"""What a client is told of a failure, and what only the server log is.

A model that raises fails its own rows with :class:`~cascadeserve.runtime.ModelFailed`, whose message holds the
model's exception text, and an exception's text may quote the input (``KeyError: 'the user's secret'``, a
tokenizer's excerpt of the prompt). The client learns which model failed and a request id; the text goes to the
server log (logger ``cascadeserve.http``, level ERROR) under that id::

    {"error": "model 'm0' failed on this request (request id 3f2a9c0d41b7; see the server log)"}

The same holds for a bug of ours (an exception no handler expected): ``internal error (request id ...)``. The
other serving errors (shed, deadline passed, stopping, too large) are the runtime's own words about the request
and go to the client as they are, and so does an upstream stage's failure (502/504): the upstream adapter's
message names the stage, the server and what went wrong (cannot connect, no answer within the timeout, the HTTP
status), which is the client's only way to tell an outage from a slow server.
"""

from __future__ import annotations

import logging
import uuid

from cascadeserve.runtime import ModelFailed, ServingError

__all__ = ["LOG", "public_error", "request_id"]

LOG = logging.getLogger("cascadeserve.http")


def request_id() -> str:
    """A fresh id to name one failed request by, in the answer and in the log."""
    return uuid.uuid4().hex[:12]


def public_error(err: BaseException) -> tuple[str, int]:
    """The message and HTTP status a client gets for ``err`` (a row's or a handler's); a model's own failure and an
    unexpected exception are logged here with a request id, which the message gives instead of their text."""
    if isinstance(err, ModelFailed) and err.status == 500:
        rid = request_id()
        LOG.error("request %s: %s", rid, err)
        return f"model {err.model!r} failed on this request (request id {rid}; see the server log)", 500
    if isinstance(err, ServingError):
        return str(err), err.status
    rid = request_id()
    LOG.error("request %s: internal error", rid, exc_info=(type(err), err, err.__traceback__))
    return f"internal error (request id {rid}; see the server log)", 500
