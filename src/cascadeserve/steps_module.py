"""Packages that are also the workload step of the same name: ``cascadeserve.profile(workload)``.

The library's three offline steps are spelled as their nouns (``cs.profile(wl)``, ``cs.plan(wl, prof)``,
``cs.simulate(plan, prof, trace=...)``), and so are three of its packages (:mod:`cascadeserve.profile`,
:mod:`cascadeserve.plan`, :mod:`cascadeserve.simulate`). Python binds a package's submodule as an attribute of its
parent once it is imported, so ``cascadeserve.profile`` is always the package; :func:`make_callable` makes that
package callable, and a call runs the step in :mod:`cascadeserve.api.steps`. Everything else about the package is
unchanged (``cascadeserve.profile.Profile``, ``import cascadeserve.plan as p``).

The step is imported only when called, so a bottom-layer package does not depend on the library's top layer.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

__all__ = ["make_callable"]


class _StepModule(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        step = getattr(importlib.import_module("cascadeserve.api.steps"), self.__name__.rpartition(".")[2])
        return step(*args, **kwargs)


def make_callable(module_name: str) -> None:
    """Make the module ``module_name`` callable as the workload step of its last name (module docstring)."""
    sys.modules[module_name].__class__ = _StepModule
