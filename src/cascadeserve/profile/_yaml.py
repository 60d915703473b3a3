"""``profile.yaml`` as text: written in block style with each curve point's timing on one line, and read back from
a composed node (which keeps line numbers for errors) as plain values."""

from __future__ import annotations

from typing import Any

import yaml


def plain(node: yaml.Node) -> Any:
    """A composed node as plain Python values (lists, dicts, numbers, strings)."""
    return yaml.constructor.SafeConstructor().construct_document(node)


class _Flow(dict[Any, Any]):
    """A mapping written on one line (a curve point's timing)."""


class _FlowList(list[Any]):
    """A list written on one line (the load before and after)."""


class _Dumper(yaml.SafeDumper):
    pass


_Dumper.add_representer(_Flow, lambda dumper, data: dumper.represent_mapping("tag:yaml.org,2002:map", data, True))
_Dumper.add_representer(_FlowList, lambda dumper, data: dumper.represent_sequence("tag:yaml.org,2002:seq", data, True))


def dump_profile_yaml(doc: dict[str, Any]) -> str:
    """``profile.yaml``'s text: block style, each curve point's timing on one line, ``±`` and ``µ`` as they are."""
    for m in doc.get("models") or []:
        timing = m.get("timing") if isinstance(m, dict) else None
        if isinstance(timing, dict) and isinstance(timing.get("points"), dict):
            timing["points"] = {b: _Flow(p) if isinstance(p, dict) else p for b, p in timing["points"].items()}
        if isinstance(timing, dict) and isinstance(timing.get("load"), list):
            timing["load"] = _FlowList(timing["load"])
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, allow_unicode=True)
