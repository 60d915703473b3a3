"""The workload file (``cascadeserve.yaml``): a model family, its validation data, devices, one SLO, the load and
the serving options in one place, for ``cascadeserve up`` and every command's ``--workload``.

* :mod:`~cascadeserve.workload.schema`: the pydantic schema and its published JSON schema;
* :mod:`~cascadeserve.workload.loader`: reading a file, with errors naming file, line and field;
* :mod:`~cascadeserve.workload.state`: the state folder (``.cascadeserve/``) and the hashes that say whether the
  profile and the plan are up to date.
"""

from __future__ import annotations

from cascadeserve.workload.loader import DEFAULT_FILE, LoadedWorkload, load_workload
from cascadeserve.workload.schema import Workload, workload_json_schema
from cascadeserve.workload.state import StateDir

__all__ = ["DEFAULT_FILE", "LoadedWorkload", "StateDir", "Workload", "load_workload", "workload_json_schema"]
