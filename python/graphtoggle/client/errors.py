"""Typed errors of the client: the daemon's Error.code mapped to graphtoggle's one
exception class per code (graphtoggle.errors: SpecError, NoAgentError,
LatePlanError, PermissionDeniedError, ...), with what the Error carried."""

from .. import errors as _errors
from ..errors import GraphToggleError

# TOGGLE_EUNIMPLEMENTED: the daemon does not serve this request type (an older
# daemon); the connection stays usable.  graphtoggle.errors' class, one per code.
UnimplementedError = _errors.UnimplementedError
UNIMPLEMENTED = UnimplementedError.code  # ERROR_CODE_UNIMPLEMENTED = TOGGLE_EUNIMPLEMENTED


class ClientProtocolError(GraphToggleError):
    """The daemon's answer made no sense for the request (wrong reply type) or the
    stream broke; the connection is closed."""
    code = _errors.ProtocolError.code  # TOGGLE_EPROTO
    code_name = _errors.ProtocolError.code_name


def from_reply(err):
    """The exception for an Error message: its class by code (a bare
    GraphToggleError for a code this package does not know), with .agents and
    .agent_ids naming the agents concerned and .message the daemon's text."""
    e = _errors.error_for(int(err.code), err.message)
    e.message = err.message
    e.agents = list(err.agents)
    e.agent_ids = list(err.agent_ids)
    return e
