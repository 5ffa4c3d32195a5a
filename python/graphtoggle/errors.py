"""Exceptions: one class per TOGGLE_E* code of toggle_error.h, all under GraphToggleError.

Each carries the code (negative int, as in C), the code's name, the static
description (toggle_strerror) and the agent's last-error text.  Callers
catch the class (`except graphtoggle.CaptureError`), not a number.
"""

# (code, TOGGLE_E* name, class name, extra bases): one row per entry of toggle_error.h's
# TOGGLE_ERROR_MAP, which Python cannot include; tests/test_binding.py checks this table
# against the loaded library's toggle_err_name(), generated from that list.
_CODES = [
    (-1, "TOGGLE_EINVAL", "InvalidArgumentError", (ValueError,)),
    (-2, "TOGGLE_ENOMEM", "OutOfMemoryError", (MemoryError,)),
    (-3, "TOGGLE_ENODRIVER", "NoDriverError", ()),
    (-4, "TOGGLE_ECUDA", "CudaError", ()),
    (-5, "TOGGLE_ECAPTURE", "CaptureError", ()),
    (-6, "TOGGLE_ENOTKERNEL", "NotKernelError", ()),
    (-7, "TOGGLE_EUNBOUND", "UnboundError", ()),
    (-8, "TOGGLE_ESTALE", "StaleError", ()),
    (-9, "TOGGLE_ELATE", "LatePlanError", ()),
    (-10, "TOGGLE_ESPEC", "SpecError", (ValueError,)),
    (-11, "TOGGLE_ERANGE", "OutOfCatalogError", (ValueError,)),
    (-12, "TOGGLE_ELIMIT", "LimitError", ()),
    (-13, "TOGGLE_ENOTSUP", "NotSupportedError", ()),
    (-14, "TOGGLE_ENOENT", "UnknownGraphError", (LookupError,)),
    (-15, "TOGGLE_ESTEP", "StepOrderError", ()),
    (-16, "TOGGLE_EPERM", "PermissionDeniedError", ()),
    (-17, "TOGGLE_EVERSION", "VersionMismatchError", ()),
    (-18, "TOGGLE_EPROTO", "ProtocolError", ()),
    (-19, "TOGGLE_ETIMEDOUT", "TimedOutError", ()),
    (-20, "TOGGLE_ENOAGENT", "NoAgentError", ()),
    (-21, "TOGGLE_EBUSY", "BusyError", ()),
    (-22, "TOGGLE_ECONNECT", "ConnectError", ()),
    (-23, "TOGGLE_EIO", "IOFailureError", ()),
    (-24, "TOGGLE_ESHM", "ShmError", ()),
    (-25, "TOGGLE_EUNIMPLEMENTED", "UnimplementedError", ()),
]


class GraphToggleError(Exception):
    """A libtoggle call (or the binding, before calling it) refused something."""
    code = 0
    code_name = "TOGGLE_E?"

    def __init__(self, detail, code=None):
        if code is not None:
            self.code = code
            self.code_name = BY_CODE[code].code_name if code in BY_CODE else "TOGGLE_E%d" % code
        self.detail = detail
        super().__init__("%s: %s" % (self.code_name, detail) if detail else self.code_name)


BY_CODE = {}
BY_NAME = {}
__all__ = ["GraphToggleError", "error_for"]

for _code, _name, _cls, _bases in _CODES:
    _c = type(_cls, (GraphToggleError,) + _bases,
              {"code": _code, "code_name": _name, "__module__": __name__,
               "__doc__": "%s (%d); its description comes from toggle_strerror()." % (_name, _code)})
    globals()[_cls] = _c
    BY_CODE[_code] = _c
    BY_NAME[_name] = _c
    __all__.append(_cls)


def error_for(code, detail):
    """The exception for a negative TOGGLE_E* code (a bare GraphToggleError for an unknown one)."""
    cls = BY_CODE.get(code)
    if cls is None:
        return GraphToggleError(detail, code)
    return cls(detail)
