"""libattn's statuses as Python exceptions. The message is libattn's own:
for source errors, the compiler's diagnostics verbatim (file:line:col, the
line and a caret under the place)."""


class AttnError(RuntimeError):
    """A libattn call failed. `status` is attn.h's attn_status, `status_name`
    its name, and str() the library's message."""

    status = None
    status_name = "ATTN_ERROR"

    def __init__(self, message, status=None, what=None):
        super().__init__(message)
        if status is not None:
            self.status = status
        self.what = what


class LibraryError(AttnError):
    """libattn could not be found or loaded, or is not this package's version."""


class SourceError(AttnError):
    """The .attn text has errors (ATTN_ERROR_SOURCE)."""


class UnsupportedError(AttnError, NotImplementedError):
    """No kernel runs the graph, or this launch of it (ATTN_ERROR_UNSUPPORTED)."""


class BindError(AttnError, ValueError):
    """A tensor or scalar does not fit the graph's declaration
    (ATTN_ERROR_INVALID_ARGUMENT, ATTN_ERROR_NOT_FOUND, ATTN_ERROR_INCOMPLETE)."""


class NoDriverError(AttnError):
    """No CUDA driver or GPU (ATTN_ERROR_NO_DRIVER)."""


_NAMES = {
    1: ("ATTN_ERROR_INVALID_ARGUMENT", BindError),
    2: ("ATTN_ERROR_NOT_FOUND", BindError),
    3: ("ATTN_ERROR_SOURCE", SourceError),
    4: ("ATTN_ERROR_UNSUPPORTED", UnsupportedError),
    5: ("ATTN_ERROR_COMPILE", AttnError),
    6: ("ATTN_ERROR_NO_DRIVER", NoDriverError),
    7: ("ATTN_ERROR_CUDA", AttnError),
    8: ("ATTN_ERROR_OUT_OF_MEMORY", AttnError),
    9: ("ATTN_ERROR_IO", AttnError),
    10: ("ATTN_ERROR_INCOMPLETE", BindError),
    11: ("ATTN_ERROR_INTERNAL", AttnError),
}


def error_for(status, message, what=None):
    name, cls = _NAMES.get(status, (f"status {status}", AttnError))
    e = cls(message, status, what)
    e.status_name = name
    return e
