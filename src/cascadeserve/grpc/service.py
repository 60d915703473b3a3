"""Triton's ``GRPCInferenceService`` (the Open Inference Protocol V2 over gRPC), so ``tritonclient.grpc`` works.

:class:`GrpcFrontEnd` is a :class:`~cascadeserve.http.app.FrontEnd`: the HTTP app's lifespan starts it once the
runtime runs and stops it (with the grace period) before the runtime stops, so it serves on the same event loop,
the same :class:`~cascadeserve.runtime.Runtime` and the same handlers as HTTP. Inference goes through the HTTP
app's :class:`~cascadeserve.http.infer.InferCore`, and statistics, readiness and tokens through its handlers: this
module only translates messages and errors.

Implemented: ServerLive, ServerReady, ModelReady, ServerMetadata, ModelMetadata, ModelInfer, ModelStreamInfer
(each request answered as it finishes; a refused one by ``error_message``, as Triton does), ModelConfig,
ModelStatistics, RepositoryIndex (every cascade served, with its state), RepositoryModelLoad and
RepositoryModelUnload (admin token; PERMISSION_DENIED where the server's cascades are fixed), LogSettings and
TraceSetting (:mod:`cascadeserve.http.settings`: reading as HTTP's GET, a change as its POST, with the admin token),
SystemSharedMemoryStatus, SystemSharedMemoryRegister and SystemSharedMemoryUnregister (the last two with the admin
token unless the server allows any client; :mod:`cascadeserve.http.shared_memory`), and infer tensors in shared
memory. The server has no GPU: CudaSharedMemoryRegister answers UNIMPLEMENTED, CudaSharedMemoryStatus lists no
region and CudaSharedMemoryUnregister finds none. With ``--auth-token``, every RPC but the health probes needs
metadata ``authorization: Bearer <token>``. Requests pass the HTTP front end's gate
(:mod:`cascadeserve.http.limits`): the message size (``max_body_bytes``), the ``BYTES`` element count, the bounds on
an LLM item's prompt, options and tokens; a model's exception text stays in the server log (INTERNAL names the
model and a request id).

Errors carry the HTTP front end's message (it names the field, input or model) under the gRPC code of its status:
400 INVALID_ARGUMENT, 401 UNAUTHENTICATED, 403 PERMISSION_DENIED, 404 NOT_FOUND, 413 RESOURCE_EXHAUSTED (a
message over ``max_body_bytes`` gets gRPC's own RESOURCE_EXHAUSTED naming the limit), 500 INTERNAL, 504
DEADLINE_EXCEEDED, and a shed call (503 with a retry hint) RESOURCE_EXHAUSTED with the hint in its message and in
the trailing metadata ``retry-after`` (seconds). A client that cancels has its rows that have not started dropped.
"""

from __future__ import annotations

import asyncio
import functools
import math
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol, TypeVar, cast

import grpc
from google.protobuf import json_format

from cascadeserve.grpc.protos import grpc_service_pb2 as pb
from cascadeserve.grpc.protos import grpc_service_pb2_grpc as pb_grpc
from cascadeserve.grpc.protos import model_config_pb2 as mc
from cascadeserve.grpc.tensors import (
    decode_classes,
    decode_inputs,
    decode_parameters,
    decode_shm_outputs,
    encode_response,
)
from cascadeserve.http.app import ServerOptions
from cascadeserve.http.clipper import context_of
from cascadeserve.http.control import AuthError
from cascadeserve.http.failures import public_error
from cascadeserve.http.infer import (
    OUTPUT_SHAPE,
    InferCore,
    InferError,
    ServedModel,
    metadata_shape,
    model_config,
)
from cascadeserve.http.logsettings import LOG
from cascadeserve.http.metrics import PrometheusObserver
from cascadeserve.http.repository import RepositoryError
from cascadeserve.http.settings import check_admin
from cascadeserve.http.shared import EXTENSIONS, ServerShared
from cascadeserve.http.shared_memory import NO_CUDA, write_outputs
from cascadeserve.http.shm_routes import check_register
from cascadeserve.http.v2 import ProtocolError
from cascadeserve.runtime import Runtime
from cascadeserve.version import __version__

__all__ = ["GrpcFrontEnd"]

_SERVICE = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"]
_CODES: dict[int, grpc.StatusCode] = {
    400: grpc.StatusCode.INVALID_ARGUMENT,
    401: grpc.StatusCode.UNAUTHENTICATED,
    403: grpc.StatusCode.PERMISSION_DENIED,
    404: grpc.StatusCode.NOT_FOUND,
    # a repository call on a cascade already served, or stopping; a shared-memory region name registered already
    409: grpc.StatusCode.FAILED_PRECONDITION,
    413: grpc.StatusCode.RESOURCE_EXHAUSTED,
    499: grpc.StatusCode.CANCELLED,
    500: grpc.StatusCode.INTERNAL,
    502: grpc.StatusCode.UNAVAILABLE,
    503: grpc.StatusCode.UNAVAILABLE,  # stopping; a shed call (with a retry hint) is RESOURCE_EXHAUSTED
    504: grpc.StatusCode.DEADLINE_EXCEEDED,
}
# Why an RPC is not served, by name (the rest: CUDA shared memory)
_WHY_NOT = {
    "RepositoryModelLoad": "this server's cascades are fixed at start-up (hot-swap a plan over HTTP instead)",
    "RepositoryModelUnload": "this server's cascades are fixed at start-up",
}


class Directory(Protocol):
    """The cascades a server serves by name, and the repository calls (``http.repository``'s ``Repository``)."""

    def api(self, name: str) -> Any: ...

    def index(self) -> list[dict[str, Any]]: ...

    def check_admin(self, authorization: str | None) -> None: ...

    async def load(self, name: str, params: Any) -> Any: ...

    async def unload(self, name: str) -> None: ...


class _Api(Protocol):
    """What the servicer needs of the HTTP app's handlers (``http.app``'s ``_Api``)."""

    runtime: Runtime
    model: ServedModel
    metrics: PrometheusObserver
    opts: ServerOptions
    core: InferCore
    shared: ServerShared

    def check_token(self, authorization: str | None) -> None: ...


_Rpc = TypeVar("_Rpc", bound=Callable[..., Awaitable[Any]])


def _rpc(*, auth: bool = True) -> Callable[[_Rpc], _Rpc]:
    """An RPC handler: the token checked first (``auth``), and every refusal turned into its gRPC status."""

    def wrap(fn: _Rpc) -> _Rpc:
        @functools.wraps(fn)
        async def handler(self: _Servicer, request: Any, context: grpc.aio.ServicerContext) -> Any:
            try:
                if auth:
                    self.api.check_token(dict(context.invocation_metadata() or ()).get("authorization"))
                return await fn(self, request, context)
            except AuthError as e:
                code = grpc.StatusCode.UNAUTHENTICATED if e.status == 401 else grpc.StatusCode.PERMISSION_DENIED
                await context.abort(code, e.message)
            except ProtocolError as e:  # InferError too: a shed call carries a retry hint
                retry_s = e.retry_after_s if isinstance(e, InferError) else None
                if retry_s is None:
                    await context.abort(_CODES.get(e.status, grpc.StatusCode.INTERNAL), e.message)
                else:
                    await context.abort(
                        grpc.StatusCode.RESOURCE_EXHAUSTED,
                        _message(e),
                        trailing_metadata=(("retry-after", _retry_after(retry_s)),),
                    )
            except Exception as e:  # a bug of ours: INTERNAL with a request id, as HTTP's 500 (gRPC would say UNKNOWN)
                await context.abort(grpc.StatusCode.INTERNAL, public_error(e)[0])

        return cast(_Rpc, handler)

    return wrap


def _retry_after(seconds: float) -> str:
    return str(max(1, math.ceil(seconds)))  # as HTTP's Retry-After: whole seconds, at least 1


def _message(e: ProtocolError) -> str:
    """The error's message; a shed call's with its retry hint."""
    if isinstance(e, InferError) and e.retry_after_s is not None:
        return f"{e.message}; retry after {_retry_after(e.retry_after_s)} s"
    return e.message


def _unimplemented(name: str) -> Callable[[Any, grpc.aio.ServicerContext], Awaitable[None]]:
    why = _WHY_NOT.get(name, NO_CUDA)

    async def handler(request: Any, context: grpc.aio.ServicerContext) -> None:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, f"{name} is not implemented: {why}")

    return handler


class _Servicer:
    """The RPCs, over the HTTP app's handlers ``api`` (the first cascade's) and, with several cascades, the
    ``directory`` that finds each one's by name and loads and unloads them."""

    def __init__(self, api: _Api, directory: Directory | None = None) -> None:
        self.api = api
        self.directory = directory

    def _for(self, name: str, version: str) -> _Api:
        """The handlers of the cascade ``name`` (404 when none is served, or it lacks ``version``)."""
        api = self.directory.api(name) if self.directory is not None and name else None
        api = api or self.api
        api.core.check_name(name, version or None)  # no version: the latest, as Triton reads it
        return cast(_Api, api)

    def __getattr__(self, name: str) -> Any:
        # only for the RPCs not defined below: the generated registration looks up every RPC of the service
        if name not in _SERVICE.methods_by_name:
            raise AttributeError(name)
        return _unimplemented(name)

    @_rpc(auth=False)
    async def ServerLive(self, request: pb.ServerLiveRequest, context: Any) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=True)

    @_rpc(auth=False)
    async def ServerReady(self, request: pb.ServerReadyRequest, context: Any) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(ready=self.api.runtime.readiness().ready)

    @_rpc()
    async def ModelReady(self, request: pb.ModelReadyRequest, context: Any) -> pb.ModelReadyResponse:
        # Triton answers an unknown model "not ready" (HTTP: 404, which tritonclient.http reads as not ready too)
        try:
            api = self._for(request.name, request.version)
        except ProtocolError:
            return pb.ModelReadyResponse(ready=False)
        return pb.ModelReadyResponse(ready=api.runtime.readiness().ready)

    @_rpc()
    async def ServerMetadata(self, request: pb.ServerMetadataRequest, context: Any) -> pb.ServerMetadataResponse:
        return pb.ServerMetadataResponse(name="cascadeserve", version=__version__, extensions=list(EXTENSIONS))

    @_rpc()
    async def ModelMetadata(self, request: pb.ModelMetadataRequest, context: Any) -> pb.ModelMetadataResponse:
        api = self._for(request.name, request.version)
        tensor = pb.ModelMetadataResponse.TensorMetadata
        return pb.ModelMetadataResponse(
            name=api.model.name,
            versions=["1"],
            platform="cascadeserve",
            inputs=[tensor(name=i.name, datatype=i.datatype, shape=metadata_shape(i.shape)) for i in api.model.inputs],
            outputs=[tensor(name=n, datatype=dt, shape=list(OUTPUT_SHAPE)) for n, dt in api.model.outputs],
        )

    @_rpc()
    async def ModelConfig(self, request: pb.ModelConfigRequest, context: Any) -> pb.ModelConfigResponse:
        api = self._for(request.name, request.version)
        config = json_format.ParseDict(model_config(api.model, api.runtime), mc.ModelConfig())  # HTTP's /config
        return pb.ModelConfigResponse(config=config)

    @_rpc()
    async def ModelStatistics(self, request: pb.ModelStatisticsRequest, context: Any) -> pb.ModelStatisticsResponse:
        # no name: the first cascade's (HTTP's /v2/models/stats of the server's own app)
        api = self._for(request.name, request.version) if request.name else self.api
        # the very numbers of HTTP's /stats (Triton's JSON is this message's JSON form)
        stats = api.metrics.stats.render(api.model.name)
        return cast(pb.ModelStatisticsResponse, json_format.ParseDict(stats, pb.ModelStatisticsResponse()))

    @_rpc()
    async def RepositoryIndex(self, request: pb.RepositoryIndexRequest, context: Any) -> pb.RepositoryIndexResponse:
        index = pb.RepositoryIndexResponse.ModelIndex
        if self.directory is None:
            return pb.RepositoryIndexResponse(models=[index(name=self.api.model.name, version="1", state="READY")])
        return pb.RepositoryIndexResponse(models=[index(**row) for row in self.directory.index()])

    @_rpc()
    async def RepositoryModelLoad(self, request: pb.RepositoryModelLoadRequest, context: Any) -> Any:
        """Load a cascade (admin token in the metadata): ``parameters`` as HTTP's load takes them (``config``, as
        tritonclient sends it, or ``plan``, ``profile``, ``models``, ``emulate``)."""
        directory = self._repository(context)
        params = {k: _parameter(v) for k, v in request.parameters.items()}
        try:
            await directory.load(request.model_name, params)
        except RepositoryError as e:
            raise ProtocolError(e.message, e.status) from None
        return pb.RepositoryModelLoadResponse()

    @_rpc()
    async def RepositoryModelUnload(self, request: pb.RepositoryModelUnloadRequest, context: Any) -> Any:
        directory = self._repository(context)
        try:
            await directory.unload(request.model_name)
        except RepositoryError as e:
            raise ProtocolError(e.message, e.status) from None
        return pb.RepositoryModelUnloadResponse()

    @_rpc()
    async def LogSettings(self, request: pb.LogSettingsRequest, context: Any) -> pb.LogSettingsResponse:
        """The log settings; those the request sets are changed first (admin token), as ``POST /v2/logging``."""
        settings = LOG.snapshot()
        if request.settings:
            check_admin(self.api.opts.admin_token, _authorization(context))
            settings = LOG.update({k: _setting(v) for k, v in request.settings.items()})
        response = pb.LogSettingsResponse()
        for key, value in settings.items():
            setting = response.settings[key]
            if isinstance(value, bool):
                setting.bool_param = value
            elif isinstance(value, int):
                setting.uint32_param = value
            else:
                setting.string_param = value
        return response

    @_rpc()
    async def TraceSetting(self, request: pb.TraceSettingRequest, context: Any) -> pb.TraceSettingResponse:
        """The trace settings of the server (or of ``model_name``); those the request sets are changed first
        (admin token; a setting with no values is cleared), as ``POST /v2/trace/setting``."""
        model = request.model_name or None
        trace = (self._for(model, "") if model is not None else self.api).shared.trace
        if request.settings:
            check_admin(self.api.opts.admin_token, _authorization(context))
            values: dict[str, Any] = {}
            for key, setting in request.settings.items():
                given = list(setting.value)
                if len(given) > 1 and key != "trace_level":
                    raise ProtocolError(f"{key}: expected one value, got {len(given)}")
                values[key] = None if not given else given if key == "trace_level" else given[0]
            settings = trace.update(values, model)
        else:
            settings = trace.snapshot(model)
        response = pb.TraceSettingResponse()
        for key, value in settings.items():
            response.settings[key].value.extend(value if isinstance(value, list) else [value])
        return response

    @_rpc()
    async def SystemSharedMemoryStatus(self, request: pb.SystemSharedMemoryStatusRequest, context: Any) -> Any:
        """Every region registered (``name``: that one; unknown: INVALID_ARGUMENT)."""
        response = pb.SystemSharedMemoryStatusResponse()
        for region in self.api.shared.shm.status(request.name or None):
            response.regions[region["name"]].CopyFrom(pb.SystemSharedMemoryStatusResponse.RegionStatus(**region))
        return response

    @_rpc()
    async def SystemSharedMemoryRegister(self, request: pb.SystemSharedMemoryRegisterRequest, context: Any) -> Any:
        """Register a region of an existing object in /dev/shm (admin token, unless the server allows any client),
        as HTTP's register."""
        opts = self.api.opts
        check_register(opts.admin_token, opts.allow_client_shm, _authorization(context))
        self.api.shared.shm.register(request.name, request.key, request.offset, request.byte_size)
        return pb.SystemSharedMemoryRegisterResponse()

    @_rpc()
    async def SystemSharedMemoryUnregister(self, request: pb.SystemSharedMemoryUnregisterRequest, context: Any) -> Any:
        """Unregister a region (as registering: admin token, unless the server allows any client); no name: all."""
        opts = self.api.opts
        check_register(opts.admin_token, opts.allow_client_shm, _authorization(context))
        self.api.shared.shm.unregister(request.name or None)
        return pb.SystemSharedMemoryUnregisterResponse()

    @_rpc()
    async def CudaSharedMemoryStatus(self, request: pb.CudaSharedMemoryStatusRequest, context: Any) -> Any:
        """No CUDA region (no GPU); one by name: INVALID_ARGUMENT. Registering one is UNIMPLEMENTED."""
        if request.name:
            raise ProtocolError(f"unknown CUDA shared memory region {request.name!r}: {NO_CUDA}")
        return pb.CudaSharedMemoryStatusResponse()

    @_rpc()
    async def CudaSharedMemoryUnregister(self, request: pb.CudaSharedMemoryUnregisterRequest, context: Any) -> Any:
        """Nothing to unregister (no GPU), as Triton answers without one."""
        return pb.CudaSharedMemoryUnregisterResponse()

    def _repository(self, context: Any) -> Directory:
        if self.directory is None:
            raise ProtocolError(f"the repository is fixed: {_WHY_NOT['RepositoryModelLoad']}", 403)
        self.directory.check_admin(dict(context.invocation_metadata() or ()).get("authorization"))
        return self.directory

    async def _infer(self, request: pb.ModelInferRequest, metadata: dict[str, str]) -> pb.ModelInferResponse:
        api = self._for(request.model_name, request.model_version)
        core = api.core
        core.shed_early()
        memory = api.shared.shm
        inputs, datatypes = decode_inputs(request, memory)
        params = decode_parameters(request.parameters)
        classes = decode_classes(request)
        targets = decode_shm_outputs(request, memory, classes)
        # a cancelled call (client gone, deadline passed) cancels this coroutine: the core drops its waiting rows
        context = context_of(params, metadata)
        done = await core.infer(inputs, params, context, request.id or None, datatypes=datatypes, classes=classes)
        if targets:
            write_outputs(memory, done.outputs, targets)
        return encode_response(api.model.name, request.id, done, [o.name for o in request.outputs], targets)

    @_rpc()
    async def ModelInfer(self, request: pb.ModelInferRequest, context: Any) -> pb.ModelInferResponse:
        return await self._infer(request, dict(context.invocation_metadata() or ()))

    @_rpc()
    async def ModelStreamInfer(self, requests: AsyncIterator[pb.ModelInferRequest], context: Any) -> None:
        """Each request of the stream runs as soon as it arrives (answers go back as they finish, each with its
        request's id); a refused one answers with ``error_message`` and the stream goes on, as Triton's does."""
        metadata = dict(context.invocation_metadata() or ())
        writing = asyncio.Lock()  # one write at a time on the stream
        running: set[asyncio.Task[None]] = set()

        async def answer(request: pb.ModelInferRequest) -> None:
            try:
                reply = pb.ModelStreamInferResponse(infer_response=await self._infer(request, metadata))
            except ProtocolError as e:
                reply = pb.ModelStreamInferResponse(
                    error_message=_message(e), infer_response=pb.ModelInferResponse(id=request.id)
                )
            async with writing:
                await context.write(reply)

        try:
            async for request in requests:
                task = asyncio.create_task(answer(request))
                running.add(task)
                task.add_done_callback(running.discard)
            if running:  # the client closed its side: answer what it sent
                await asyncio.gather(*running)
        finally:  # the stream was cancelled: each cancelled task drops its waiting rows (the core cancels them)
            for task in running:
                task.cancel()


class GrpcFrontEnd:
    """The gRPC server on ``host:port`` (0: any free port; :attr:`port` is the one bound once started), TLS with
    ``tls`` (PEM private key, certificate chain)."""

    name = "grpc"

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, tls: tuple[bytes, bytes] | None = None) -> None:
        self.host = host
        self.requested_port = port
        self.tls = tls
        self.port: int | None = None
        self.directory: Directory | None = None  # several cascades: set by the repository that serves them
        self._server: Any = None

    async def start(self, api: _Api) -> None:
        limit = api.opts.max_body_bytes  # the HTTP body limit: past it gRPC answers RESOURCE_EXHAUSTED itself
        server = grpc.aio.server(options=[("grpc.max_receive_message_length", limit)])
        pb_grpc.add_GRPCInferenceServiceServicer_to_server(_Servicer(api, self.directory), server)
        host = f"[{self.host}]" if ":" in self.host else self.host  # an IPv6 literal
        address = f"{host}:{self.requested_port}"
        if self.tls is None:
            self.port = server.add_insecure_port(address)
        else:
            self.port = server.add_secure_port(address, grpc.ssl_server_credentials([self.tls]))
        await server.start()
        self._server = server

    async def stop(self, grace_s: float) -> None:
        if self._server is not None:
            await self._server.stop(grace_s)  # refuse new calls; cancel those still running after the grace
            self._server = None


def _authorization(context: Any) -> str | None:
    """The call's ``authorization`` metadata, if any."""
    value = dict(context.invocation_metadata() or ()).get("authorization")
    return None if value is None else str(value)


def _setting(p: Any) -> Any:
    """A ``LogSettingsRequest.SettingValue``'s value (bool, uint32 or string; ``None`` when unset)."""
    kind = p.WhichOneof("parameter_choice")
    return None if kind is None else getattr(p, kind)


def _parameter(p: Any) -> Any:
    """A ``ModelRepositoryParameter``'s value (bool, int, string or bytes)."""
    kind = p.WhichOneof("parameter_choice")
    value = getattr(p, kind) if kind is not None else None
    return value.decode() if isinstance(value, bytes) else value
