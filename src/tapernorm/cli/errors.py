"""Which errors of a command end in one line (and with which exit status), and which keep their
traceback: one line for bad input (ValueError, the project's ConfigError among them), files
(OSError, safetensors' errors), the project's own error classes (DeviceError, CheckpointError,
DataUnavailableError, ...), a missing optional package, out of memory and Ctrl-C; anything else,
torch's RuntimeError about shapes or CUDA included, is a bug or a broken machine and keeps its
traceback."""

from __future__ import annotations

import errno
import sys

EXTRAS = {"transformers": "hf", "datasets": "hf", "huggingface_hub": "hf"}  # module -> extra


def _missing_extra(e: ImportError) -> str | None:
    """'error: <module> is not installed: pip install ...' if `e` is an optional dependency's absence."""
    while e is not None and not getattr(e, "name", None):
        e = e.__cause__ if isinstance(e.__cause__, ImportError) else None
    module = (e.name or "").split(".")[0] if e is not None else ""
    if module not in EXTRAS:
        return None
    return (
        f"error: {module} is not installed: pip install -e '.[{EXTRAS[module]}]' (in this checkout)"
    )


def _out_of_memory(e: BaseException) -> bool:
    if not isinstance(e, (MemoryError, RuntimeError)):
        return False
    if "torch" not in sys.modules:  # (then no torch error can be out of memory)
        return isinstance(e, MemoryError)
    from ..runtime.device import is_out_of_memory

    return is_out_of_memory(e)


def _memory_advice(e: BaseException, command: str) -> str:
    """What to lower: what the error names (an evaluation's OutOfMemory), else by command."""
    if type(e).__name__ == "OutOfMemory":
        return f"error: {e}"
    if command == "train":
        return (
            "error: out of memory: use a smaller model (model.n_embd, n_layer, vocab_size), "
            "batch (train.batch_size) or context (model.block_size), or a larger machine"
        )
    return (
        "error: out of memory: lower the command's sizes (--batch-size, --windows, ... where it "
        "has them), or use a larger machine"
    )


def _ours(e: BaseException) -> bool:
    """Whether `e` is of an error class tapernorm defines (a plain RuntimeError is not: torch raises
    those for shape and CUDA errors)."""
    return any(cls.__module__.split(".")[0] == "tapernorm" for cls in type(e).__mro__)


def one_line(e: BaseException, command: str = "") -> tuple[str, int] | None:
    """The message and exit status of an error the user can act on; None for a bug (a traceback)."""
    if isinstance(e, KeyboardInterrupt):
        return f"interrupted{'; ' + str(e) if str(e) else ''}", 130
    if isinstance(e, ImportError):
        missing = _missing_extra(e)
        return None if missing is None else (missing, 2)
    if _out_of_memory(e):
        return _memory_advice(e, command), 2
    if isinstance(e, OSError) and e.errno == errno.ENOSPC:
        where = f" writing {e.filename}" if e.filename else ""
        return f"error: no space left on device{where}: free some space and rerun the command", 2
    if isinstance(e, (ValueError, OSError)) or _ours(e) or type(e).__name__ == "SafetensorError":
        return f"error: {' '.join(str(e).split()) if chr(10) in str(e) else e}", 2
    return None
