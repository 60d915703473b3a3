"""The package's version, in a module of its own: the front ends report it without importing the package root
(whose lazy public names point at the top layer, :mod:`cascadeserve.api`)."""

__all__ = ["__version__"]

__version__ = "0.1.0"
