"""What the lab benches under ``tools/`` (each op's own, ``tools/<op>/bench*.py``) share past their timing: one
row's like-for-like figures and the JSON file of their rows. Pure but for the file it writes."""
from __future__ import annotations

import json
import sys
from typing import Mapping

# The label of pyrms launched without programmatic dependent launch, as the others' kernels launch: the
# speedups are of it, like for like.
NOPDL = "pyrms (no pdl)"


def figures(us: Mapping[str, float | None], nbytes: int, ceiling_gbps: float, *, fraction_of: str = NOPDL,
            versus: Mapping[str, str] | None = None) -> dict:
    """One row's figures from its device times (µs per call by label; None: not timed): for each
    ``speedup_vs_<name>`` of ``versus`` (name -> label), that implementation's time over pyrms's without PDL;
    ``speedup_vs_fastest_other``, the fastest implementation's not pyrms's (no label starting "pyrms") over it;
    ``fraction_of_ceiling``, the bandwidth of ``nbytes`` in ``fraction_of``'s time over the copy ceiling.
    A figure whose times are missing is None."""
    mine = us.get(NOPDL)
    others = [v for k, v in us.items() if not k.startswith("pyrms") and v]
    found = {f"speedup_vs_{name}": us[label] / mine if mine and us.get(label) else None
             for name, label in (versus or {}).items()}
    found["speedup_vs_fastest_other"] = min(others) / mine if mine and others else None
    timed = us.get(fraction_of)
    found["fraction_of_ceiling"] = (nbytes / (timed * 1e-6)) / (ceiling_gbps * 1e9) if timed else None
    return found


def write_json(path: str, ceiling_gbps: float, results: list) -> None:
    """The rows as JSON at ``path``, with the ceiling they are fractions of and the command line."""
    with open(path, "w") as f:
        json.dump({"ceiling_gbps": ceiling_gbps, "results": results, "argv": sys.argv}, f, indent=1)
