"""The ops: one folder per op family (its public function, plan, prepared launch, twin and registry entry),
over the shared machinery in this package's private modules (the row plan and the row core's twin, operand
reading, prepared launches, views, placement, the workspace pool, the norm backward). ``registry`` lists the
ops."""
from ._norm_backward.workspace import backward_workspace_bytes
from ._workspace import release_workspaces

__all__ = ["backward_workspace_bytes", "release_workspaces"]
