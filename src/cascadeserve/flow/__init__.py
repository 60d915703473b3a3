"""Prediction pipelines as dataflows (after Cloudflow, Sreekanti et al.): the Table API, its optimiser, and
execution on an embedded executor, on Ray, or, for a cascade, on the gear runtime.

* :class:`Table` (:mod:`~cascadeserve.flow.table`): rows under a typed schema, each with a row id (:data:`rowID`).
* :class:`Dataflow` (:mod:`~cascadeserve.flow.dataflow`): ``map``, ``filter``, ``groupby``, ``agg``, ``join``,
  ``union``, ``anyof``, ``lookup``, ``extend``; ``output``, ``deploy``, ``execute``.
* :mod:`~cascadeserve.flow.optimize`: fusion, competitive execution, batching across calls, locality-aware
  lookups, each switchable through :class:`Optimizations`.
* Executors: :class:`LocalExecutor` (threads), ``RayExecutor`` (:mod:`cascadeserve.flow.on_ray`, Ray actors),
  ``GearExecutor`` (:mod:`cascadeserve.flow.cascade`, a recognised cascade on the gear runtime).
* :mod:`~cascadeserve.flow.kvs`: :class:`MemoryStore` (embedded) and :class:`RedisStore`.
* :mod:`~cascadeserve.flow.models`: :func:`model` (a model operator from an adapter or a ``models.yaml`` entry),
  :func:`uncertain` (the cascade's exit rule as a filter) and :func:`cascade_answer`.
"""

from __future__ import annotations

from cascadeserve.flow.combine import AGGREGATES
from cascadeserve.flow.dataflow import Dataflow
from cascadeserve.flow.executor import Executor
from cascadeserve.flow.graph import Graph, Node
from cascadeserve.flow.kvs import KVStore, MemoryStore, RedisStore
from cascadeserve.flow.local import LocalExecutor
from cascadeserve.flow.models import ModelOp, cascade_answer, model, uncertain
from cascadeserve.flow.operators import Col, col
from cascadeserve.flow.optimize import ALL, NONE, Optimizations
from cascadeserve.flow.schema import FlowError, FlowTypeError, Schema
from cascadeserve.flow.table import ROW_ID, Row, Table, rowID

__all__ = [
    "AGGREGATES",
    "ALL",
    "NONE",
    "ROW_ID",
    "Col",
    "Dataflow",
    "Executor",
    "FlowError",
    "FlowTypeError",
    "Graph",
    "KVStore",
    "LocalExecutor",
    "MemoryStore",
    "ModelOp",
    "Node",
    "Optimizations",
    "RedisStore",
    "Row",
    "Schema",
    "Table",
    "cascade_answer",
    "col",
    "model",
    "rowID",
    "uncertain",
]
