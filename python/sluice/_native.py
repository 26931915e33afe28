"""ctypes bindings of libsluice_trainer.so (include/sluice/trainer.h, tensor.h, err.h).

The Structures below mirror the C structs field for field; ctypes applies the
same alignment rules as the C compiler on the platform ABI, so the implicit
padding (after sl_ikjt_t.batch_size, sl_batch_origin_t.epoch, ...) comes out
the same. tests/test_layout.py compiles the headers and compares every
offset and size, so a header change that is not mirrored here fails a test.

Which library is loaded, the first that loads of: the one bundled in this
package (sluice/libsluice_trainer.so, put there by `pip install`); env
SLUICE_TRAINER_LIB (a path; when set, nothing after it is tried); the build
tree (build/libsluice_trainer.so) of the checkout this package sits in; the
system loader (libsluice_trainer.so.2 on the library path, as `cmake
--install` puts it).
"""

import ctypes
import os
from typing import Any, List, Optional

c_char_pp = ctypes.POINTER(ctypes.c_char_p)

# sl_err_t (err.h): 0 = OK, negative = error.
SL_OK = 0
SL_ERR_TIMEOUT = -9
SL_ERR_CLOSED = -11
ERR_NAMES = {
    0: "SL_OK",
    -1: "SL_ERR_NOMEM",
    -2: "SL_ERR_INVALID",
    -3: "SL_ERR_CORRUPT",
    -4: "SL_ERR_TRUNCATED",
    -5: "SL_ERR_VERSION",
    -6: "SL_ERR_TOO_LARGE",
    -7: "SL_ERR_IO",
    -8: "SL_ERR_NOT_FOUND",
    -9: "SL_ERR_TIMEOUT",
    -10: "SL_ERR_AGAIN",
    -11: "SL_ERR_CLOSED",
    -12: "SL_ERR_PROTOCOL",
    -13: "SL_ERR_UNSUPPORTED",
}
SL_ERROR_MSG_MAX = 512
SL_TRAINER_FRESHNESS_BUCKETS = 14  # include/sluice/trainer.h


class sl_error_t(ctypes.Structure):
    _fields_ = [
        ("code", ctypes.c_int),  # sl_err_t: a C enum with int-range values
        ("msg", ctypes.c_char * SL_ERROR_MSG_MAX),
    ]


class sl_kjt_t(ctypes.Structure):
    _fields_ = [
        ("num_keys", ctypes.c_uint32),
        ("stride", ctypes.c_uint32),
        ("num_values", ctypes.c_uint64),
        ("keys", c_char_pp),
        ("lengths", ctypes.POINTER(ctypes.c_int32)),
        ("values", ctypes.POINTER(ctypes.c_int64)),
        ("weights", ctypes.POINTER(ctypes.c_float)),
    ]


class sl_ikjt_t(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("unique", sl_kjt_t),
        ("batch_size", ctypes.c_uint32),
        ("inverse", ctypes.POINTER(ctypes.c_int32)),
    ]


class sl_dense_t(ctypes.Structure):
    _fields_ = [
        ("rows", ctypes.c_uint32),
        ("cols", ctypes.c_uint32),
        ("names", c_char_pp),
        ("data", ctypes.POINTER(ctypes.c_float)),
    ]


class sl_batch_origin_t(ctypes.Structure):
    _fields_ = [
        ("job_id", ctypes.c_uint64),
        ("epoch", ctypes.c_uint32),
        ("split_id", ctypes.c_uint64),
        ("first_row", ctypes.c_uint64),
        ("sequence", ctypes.c_uint64),
    ]


class sl_batch_t(ctypes.Structure):
    _fields_ = [
        ("arena", ctypes.c_void_p),
        ("batch_size", ctypes.c_uint32),
        ("sparse", sl_kjt_t),
        ("num_groups", ctypes.c_uint32),
        ("groups", ctypes.POINTER(sl_ikjt_t)),
        ("dense", sl_dense_t),
        ("labels", sl_dense_t),
        ("sample_ids", ctypes.POINTER(ctypes.c_int64)),
        ("origin", sl_batch_origin_t),
        ("release", ctypes.CFUNCTYPE(None, ctypes.c_void_p)),
        ("release_ctx", ctypes.c_void_p),
        ("record_ms", ctypes.POINTER(ctypes.c_int64)),
        ("order_g_plus_one", ctypes.c_uint64),
    ]


class sl_wire_limits_t(ctypes.Structure):
    _fields_ = [
        ("max_frame_bytes", ctypes.c_uint64),
        ("max_batch_size", ctypes.c_uint32),
        ("max_keys", ctypes.c_uint32),
        ("max_groups", ctypes.c_uint32),
    ]


class sl_trainer_opts_t(ctypes.Structure):
    _fields_ = [
        ("address", ctypes.c_char_p),
        ("client_name", ctypes.c_char_p),
        ("prefetch", ctypes.c_uint32),
        ("connect_timeout_ms", ctypes.c_int),
        ("reconnect_ms", ctypes.c_int),
        ("rank", ctypes.c_uint32),
        ("world_size", ctypes.c_uint32),
        ("limits", sl_wire_limits_t),
        ("allocator", ctypes.c_void_p),  # const sl_allocator_t *; NULL: default
        ("master", ctypes.c_char_p),
        ("job_id", ctypes.c_char_p),
        ("client_id", ctypes.c_char_p),
        ("refresh_ms", ctypes.c_int),
        ("cluster_secret_file", ctypes.c_char_p),
        ("metrics_address", ctypes.c_char_p),
        ("no_shm", ctypes.c_bool),
        ("shm_copy", ctypes.c_bool),
        ("shm_read_only", ctypes.c_bool),
    ]


class sl_trainer_stats_t(ctypes.Structure):
    _fields_ = [
        ("batches", ctypes.c_uint64),
        ("samples", ctypes.c_uint64),
        ("bytes", ctypes.c_uint64),
        ("wait_ns", ctypes.c_uint64),
        ("reconnects", ctypes.c_uint64),
        ("queued", ctypes.c_uint32),
        ("workers", ctypes.c_uint32),
        ("committed", ctypes.c_uint64),
        ("dropped", ctypes.c_uint64),
        ("freshness_buckets", ctypes.c_uint64 * SL_TRAINER_FRESHNESS_BUCKETS),
        ("freshness_count", ctypes.c_uint64),
        ("freshness_sum_ms", ctypes.c_uint64),
        ("batches_shm", ctypes.c_uint64),
        ("batches_socket", ctypes.c_uint64),
    ]


def freshness_bounds_ms(lib: Any) -> List[int]:
    """The freshness buckets' upper bounds in ms, from the library
    (sl_trainer_freshness_bounds_ms): one fewer than the buckets."""
    arr = (ctypes.c_uint64 * (SL_TRAINER_FRESHNESS_BUCKETS - 1)).in_dll(
        lib, "sl_trainer_freshness_bounds_ms"
    )
    return [int(x) for x in arr]


# Every mirrored struct, by C name (for the layout test).
STRUCTS = {
    "sl_error_t": sl_error_t,
    "sl_kjt_t": sl_kjt_t,
    "sl_ikjt_t": sl_ikjt_t,
    "sl_dense_t": sl_dense_t,
    "sl_batch_origin_t": sl_batch_origin_t,
    "sl_batch_t": sl_batch_t,
    "sl_wire_limits_t": sl_wire_limits_t,
    "sl_trainer_opts_t": sl_trainer_opts_t,
    "sl_trainer_stats_t": sl_trainer_stats_t,
}


LIB_NAME = "libsluice_trainer.so"


def _candidates() -> List[str]:
    """Where to look for the library, in order (see the module's doc)."""
    here = os.path.dirname(os.path.abspath(__file__))
    out = [os.path.join(here, LIB_NAME)]
    env = os.environ.get("SLUICE_TRAINER_LIB")
    if env:
        return out + [env]
    # python/sluice/_native.py of a checkout: the repository root is two up.
    root = os.path.dirname(os.path.dirname(here))
    if os.path.basename(os.path.dirname(here)) == "python" and os.path.exists(
        os.path.join(root, "CMakeLists.txt")
    ):
        out.append(os.path.join(root, "build", LIB_NAME))
    return out + [LIB_NAME + ".2", LIB_NAME]


def _declare(lib: ctypes.CDLL) -> ctypes.CDLL:
    p = ctypes.POINTER
    lib.sl_err_str.argtypes = [ctypes.c_int]
    lib.sl_err_str.restype = ctypes.c_char_p
    lib.sl_trainer_opts_default.argtypes = []
    lib.sl_trainer_opts_default.restype = sl_trainer_opts_t
    lib.sl_trainer_connect.argtypes = [p(sl_trainer_opts_t), p(ctypes.c_void_p), p(sl_error_t)]
    lib.sl_trainer_connect.restype = ctypes.c_int
    lib.sl_trainer_next.argtypes = [ctypes.c_void_p, ctypes.c_int, p(p(sl_batch_t)), p(sl_error_t)]
    lib.sl_trainer_next.restype = ctypes.c_int
    lib.sl_trainer_release.argtypes = [ctypes.c_void_p, p(sl_batch_t)]
    lib.sl_trainer_release.restype = None
    lib.sl_trainer_stats.argtypes = [ctypes.c_void_p, p(sl_trainer_stats_t)]
    lib.sl_trainer_stats.restype = None
    lib.sl_trainer_metrics_port.argtypes = [ctypes.c_void_p]
    lib.sl_trainer_metrics_port.restype = ctypes.c_uint16
    lib.sl_trainer_close.argtypes = [ctypes.c_void_p]
    lib.sl_trainer_close.restype = None
    lib.sl_trainer_resume_token.argtypes = [
        ctypes.c_void_p,
        ctypes.c_int,
        p(p(ctypes.c_uint8)),
        p(ctypes.c_size_t),
        p(sl_error_t),
    ]
    lib.sl_trainer_resume_token.restype = ctypes.c_int
    lib.sl_trainer_resume_token_at.argtypes = [
        ctypes.c_void_p,
        ctypes.c_int64,
        ctypes.c_int,
        p(p(ctypes.c_uint8)),
        p(ctypes.c_size_t),
        p(sl_error_t),
    ]
    lib.sl_trainer_resume_token_at.restype = ctypes.c_int
    lib.sl_trainer_token_free.argtypes = [ctypes.c_void_p, p(ctypes.c_uint8), ctypes.c_size_t]
    lib.sl_trainer_token_free.restype = None
    lib.sl_batch_destroy.argtypes = [p(sl_batch_t)]
    lib.sl_batch_destroy.restype = None
    return lib


_lib: Optional[ctypes.CDLL] = None
_lib_path: Optional[str] = None


def load() -> ctypes.CDLL:
    """The loaded library (loaded on first use). ctypes.CDLL releases the GIL
    around every call, so a thread blocked in sl_trainer_next does not stop
    the rest of the program. Raises OSError naming every place tried."""
    global _lib, _lib_path
    if _lib is not None:
        return _lib
    tried = []
    for cand in _candidates():
        if os.sep in cand and not os.path.exists(cand):
            tried.append("%s (no such file)" % cand)
            continue
        try:
            lib = ctypes.CDLL(cand)
        except OSError as e:
            tried.append("%s (%s)" % (cand, e))
            continue
        _lib, _lib_path = _declare(lib), cand
        return _lib
    raise OSError(
        "sluice: cannot load libsluice_trainer.so (pip install the package, or set "
        "SLUICE_TRAINER_LIB to the library's path). Tried: "
        + "; ".join(tried)
    )


def library_path() -> str:
    """Where the loaded library came from (loads it if needed)."""
    load()
    assert _lib_path is not None
    return _lib_path


def err_name(code: int) -> str:
    return ERR_NAMES.get(code, "sl_err_t(%d)" % code)
