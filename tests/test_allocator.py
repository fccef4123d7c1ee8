"""runtime.allocator: glibc's malloc keeps freed memory for a training process's next step."""

import ctypes
import platform
import subprocess
import sys

import pytest

from tapernorm.runtime import allocator


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_glibc_takes_the_thresholds():
    code = "from tapernorm.runtime.allocator import keep_freed_memory as k; print(k())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


def test_a_libc_without_mallopt_is_left_as_it_is(monkeypatch):
    class NoMallopt:
        def __init__(self, name):
            pass

    monkeypatch.setattr(ctypes, "CDLL", NoMallopt)
    assert allocator.keep_freed_memory() is False


def test_a_libc_that_refuses_is_reported(monkeypatch):
    class Refusing:
        def __init__(self, name):
            self.mallopt = lambda param, value: 0

    monkeypatch.setattr(ctypes, "CDLL", Refusing)
    assert allocator.keep_freed_memory() is False
