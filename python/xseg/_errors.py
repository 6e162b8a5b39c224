"""xseg._errors: the library's error codes and the exception that carries them."""

# Error codes of include/xseg.h.
XSEG_OK = 0
XSEG_EINVAL = 1
XSEG_ENOMEM = 2
XSEG_ECONFIG = 3
XSEG_ENODRIVER = 4
XSEG_ENODEV = 5
XSEG_EBACKEND = 6
XSEG_ENOTSUP = 7
XSEG_EBUSY = 8
XSEG_ENOTREADY = 9
XSEG_ECORRUPT = 10
XSEG_ERANGE = 11

ERROR_NAMES = {
    XSEG_OK: "XSEG_OK",
    XSEG_EINVAL: "XSEG_EINVAL",
    XSEG_ENOMEM: "XSEG_ENOMEM",
    XSEG_ECONFIG: "XSEG_ECONFIG",
    XSEG_ENODRIVER: "XSEG_ENODRIVER",
    XSEG_ENODEV: "XSEG_ENODEV",
    XSEG_EBACKEND: "XSEG_EBACKEND",
    XSEG_ENOTSUP: "XSEG_ENOTSUP",
    XSEG_EBUSY: "XSEG_EBUSY",
    XSEG_ENOTREADY: "XSEG_ENOTREADY",
    XSEG_ECORRUPT: "XSEG_ECORRUPT",
    XSEG_ERANGE: "XSEG_ERANGE",
}


class XsegError(RuntimeError):
    """An error reported by libxseg, or a failure to load or use it.

    ``code`` is the XSEG_E* code (an int), or None when the error did not
    come from the library (for instance when it could not be loaded).
    ``message`` is the library's xseg_last_error() text or our own.
    """

    def __init__(self, code, message):
        self.code = code
        self.message = message
        if code is None:
            text = message
        else:
            text = "[%s] %s" % (ERROR_NAMES.get(code, "error %d" % code), message)
        super().__init__(text)
