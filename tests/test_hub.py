"""The Hub probe shared by dataset loading and model import (tapernorm.interop.hub); no network used."""

import socket
import sys
import types

import pytest

from tapernorm.interop import hub

PROXIES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")


@pytest.fixture
def no_proxy(monkeypatch):
    for name in PROXIES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def clean_offline(monkeypatch):
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delitem(sys.modules, "huggingface_hub.constants", raising=False)


@pytest.mark.parametrize(
    ("value", "true"),
    [("1", True), ("on", True), (" YES ", True), ("True", True), ("0", False), ("", False)],
)
def test_env_true(monkeypatch, value, true):
    monkeypatch.setenv("TAPERNORM_TEST_FLAG", value)
    assert hub.env_true("TAPERNORM_TEST_FLAG") is true


def test_offline_flags(monkeypatch, clean_offline):
    assert not hub.offline("HF_DATASETS_OFFLINE")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")  # only the library that reads it
    assert hub.offline("TRANSFORMERS_OFFLINE") and not hub.offline("HF_DATASETS_OFFLINE")
    monkeypatch.setenv("HF_HUB_OFFLINE", "yes")  # every library
    assert hub.offline() and hub.offline("HF_DATASETS_OFFLINE")


def test_offline_follows_huggingface_hub(monkeypatch, clean_offline):
    constants = types.SimpleNamespace(HF_HUB_OFFLINE=False)
    monkeypatch.setitem(sys.modules, "huggingface_hub.constants", constants)
    assert not hub.offline()
    constants.HF_HUB_OFFLINE = True  # set in-process, not through the environment
    assert hub.offline()


def test_reachable_probes_the_endpoint(monkeypatch, no_proxy):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
        assert hub.reachable(timeout=2.0)
    assert not hub.reachable(timeout=2.0)  # closed: connection refused


def test_reachable_assumes_yes_through_a_proxy(monkeypatch, no_proxy):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:1")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    assert hub.reachable(timeout=0.1)
