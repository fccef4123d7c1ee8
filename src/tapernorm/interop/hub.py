"""Can the Hugging Face Hub be used? Offline flags and a quick reachability probe.

Shared by dataset loading (tapernorm.data) and model import (tapernorm.interop.hf_import): with no
network, both go to the local cache at once and fail in seconds with a message saying how to supply
a local copy, rather than after the libraries' retries.
"""

from __future__ import annotations

import os
import socket
import sys
import urllib.parse

_TRUE = {"1", "ON", "YES", "TRUE"}  # the values huggingface_hub reads as true
_PROXIES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")
DEFAULT_ENDPOINT = "https://huggingface.co"


def env_true(name: str) -> bool:
    """Whether environment variable `name` is set to a true value (1, on, yes, true)."""
    return os.environ.get(name, "").strip().upper() in _TRUE


def offline(*flags: str) -> bool:
    """Whether offline mode is asked for: HF_HUB_OFFLINE or one of `flags` (a library's own
    variable, e.g. HF_DATASETS_OFFLINE or TRANSFORMERS_OFFLINE) is true, or huggingface_hub,
    if already imported, is in offline mode."""
    constants = sys.modules.get("huggingface_hub.constants")
    if constants is not None and getattr(constants, "HF_HUB_OFFLINE", False):
        return True
    return any(env_true(name) for name in ("HF_HUB_OFFLINE", *flags))


def reachable(timeout: float = 3.0) -> bool:
    """A quick TCP connection to the Hub endpoint (HF_ENDPOINT). Through a proxy the Hub cannot be
    probed directly: then assume it is reachable and let the libraries try."""
    if any(os.environ.get(k) for k in _PROXIES):
        return True
    url = urllib.parse.urlsplit(os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT)
    port = url.port or (80 if url.scheme == "http" else 443)
    try:
        socket.create_connection((url.hostname, port), timeout=timeout).close()
        return True
    except OSError:
        return False
