"""The ops: one folder per op family (its public function, plan, prepared launch, twin and registry entry),
over the shared machinery in this package's private modules (the row plan and the row core's twin, operand
reading, prepared launches, views, placement, the workspace pool). ``registry`` lists the ops."""
from ._workspace import release_workspaces

__all__ = ["release_workspaces"]
