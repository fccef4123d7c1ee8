"""HostState: a module whose small state buffers (a gate, a flag, a count) have host copies, so
that a training step branches on Python values and never reads the device (TaperNorm, FakeNorm and
the scale anchor are ones)."""

from __future__ import annotations

import torch
from torch import nn


class HostState(nn.Module):
    """Host copies of a module's small state buffers (a gate, a flag, a count), so that a training
    step branches on Python values and never reads the device. The buffers stay what checkpoints
    hold. A buffer written other than through `set_host` (fill_, load_state_dict) is re-read once:
    in-place writes bump a tensor's version counter, which lives on the host."""

    HOST_BUFFERS: dict[str, type] = {}  # buffer name -> the Python type of its host copy
    FROZEN_BUFFER = "frozen"  # the bool buffer that says `freeze` ran (its state-dict name)

    def _init_host(self, **values) -> None:
        """At construction: the buffers' initial values (never read: they may be on `meta`)."""
        self._host = dict(values)
        self._versions = self._buffer_versions()

    def _reload_host(self) -> None:
        self._host = {name: kind(self._buffers[name]) for name, kind in self.HOST_BUFFERS.items()}
        self._versions = self._buffer_versions()

    def _buffer_versions(self) -> tuple[int, ...] | None:
        try:
            return tuple(self._buffers[name]._version for name in self.HOST_BUFFERS)
        except RuntimeError:  # inference tensors keep no version counter
            return None

    def host(self, name: str):
        """The buffer `name` as a Python value, read from the device only if written elsewhere."""
        if not torch.compiler.is_compiling():
            versions = self._buffer_versions()
            if versions is not None and versions != self._versions:
                self._reload_host()  # written directly or loaded: read it once
        return self._host[name]

    @property
    def is_frozen(self) -> bool:
        """Whether the learned statistic is frozen (`freeze` ran: TaperNorm's c, FakeNorm's s, the
        anchor's s_tgt), without a device read."""
        return self.host(self.FROZEN_BUFFER)

    def set_host(self, name: str, value) -> None:
        """Write buffer `name` (on its device) and its host copy, rounded as the buffer holds it."""
        buffer = self._buffers[name]
        self.host(name)  # take in any write made elsewhere first
        buffer.fill_(value)
        self._host[name] = self.HOST_BUFFERS[name](torch.tensor(value, dtype=buffer.dtype))
        self._versions = self._buffer_versions()

    def _apply(self, fn, recurse=True):
        self.host(next(iter(self.HOST_BUFFERS)))  # take in writes made before the move
        out = super()._apply(fn, recurse)  # .to(), .cuda(): new tensors, same values
        self._versions = self._buffer_versions()
        return out
