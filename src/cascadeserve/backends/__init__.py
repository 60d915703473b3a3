"""Execution backends beyond the embedded one.

The embedded backend (:class:`cascadeserve.runtime.LocalBackend`) stays the default. :mod:`cascadeserve.backends.ray`
runs the same runtime on a Ray cluster; it is the only module of the package that imports ``ray`` (install the
``[ray]`` extra), so this package imports nothing eagerly.
"""

from __future__ import annotations

__all__: list[str] = []
