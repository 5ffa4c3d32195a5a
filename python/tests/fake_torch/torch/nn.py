"""torch.nn of the fake: Module with forward hooks, ModuleList."""

from ._tensor import Module, ModuleList  # noqa: F401
