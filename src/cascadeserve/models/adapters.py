"""Adapters: one class per framework, each turning a framework's model into :class:`~cascadeserve.models.Model`.

Every adapter takes the model object itself, or a ``loader`` (a zero-argument callable that builds it) or a
``path`` to read at :meth:`load` time, so a config can name heavy models without building them up front. Each
one has optional ``preprocess`` (applied to the raw batch: scaling, reshaping, tokenising) and ``postprocess``
(applied to the framework's output: pooling, a classifier head) hooks, and checks that the result has the shape
``[n, classes]``; a model that returns anything else is an error that names the model.

* :class:`CallableAdapter`: any ``scores = f(batch)``.
* :class:`TorchAdapter`: an ``nn.Module`` (or a TorchScript file) in eval mode under ``torch.inference_mode``,
  on a chosen device, with an optional thread count. ``torch.set_num_threads`` is process-wide, so the last
  adapter loaded sets it for all; the profiler and the demo pass the same count to every model.
* :class:`SklearnAdapter`: an estimator with ``predict_proba`` (or a pickle of one).
* :class:`OnnxAdapter`: an ONNX Runtime session on a ``.onnx`` file (intra-op threads are per session).
* :class:`HFAdapter`: a Hugging Face ``transformers`` sequence classifier or text-classification pipeline from a
  *local* directory; the hub is never contacted (``HF_HUB_OFFLINE=1`` and ``local_files_only``).
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from cascadeserve.models.base import ModelLoadError, batch_rows, require

__all__ = [
    "Adapter",
    "CallableAdapter",
    "HFAdapter",
    "OnnxAdapter",
    "SklearnAdapter",
    "TorchAdapter",
]

Hook = Callable[[Any], Any]


class Adapter:
    """The shared part: load once, preprocess, run, postprocess, check the shape of the scores."""

    framework = "callable"

    def __init__(self, name: str, *, preprocess: Hook | None = None, postprocess: Hook | None = None) -> None:
        self.name = name
        self.preprocess = preprocess
        self.postprocess = postprocess
        self.loaded = False

    # -- the protocol ----------------------------------------------------------------------------------------
    def load(self) -> None:
        if self.loaded:
            return
        try:
            self._load()
        except ModelLoadError:
            raise
        except Exception as e:  # a user's factory or file can fail in any way; name the model and the reason
            raise ModelLoadError(f"model {self.name!r} failed to load: {type(e).__name__}: {e}") from e
        self.loaded = True

    def predict(self, batch: Any) -> np.ndarray:
        self.load()
        n = batch_rows(batch)
        x = self.preprocess(batch) if self.preprocess is not None else batch
        out = self._run(x)
        if self.postprocess is not None:
            out = self.postprocess(out)
        scores = np.asarray(out, dtype=np.float64)
        if scores.ndim != 2 or scores.shape[0] != n or scores.shape[1] < 2:
            raise ModelLoadError(
                f"model {self.name!r}: expected scores of shape [{n}, classes>=2] for a batch of {n}, "
                f"got {list(scores.shape)}"
            )
        return scores

    def __call__(self, batch: Any) -> np.ndarray:
        """Adapters are also plain ``scores = f(batch)`` callables (what the runtime's devices call)."""
        return self.predict(batch)

    def memory_mb(self) -> float | None:
        return None

    # -- per framework ---------------------------------------------------------------------------------------
    def _load(self) -> None:
        raise NotImplementedError

    def _run(self, x: Any) -> Any:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


def _build(name: str, obj: Any, loader: Callable[[], Any] | None, what: str) -> Any:
    if obj is not None:
        return obj
    if loader is None:
        raise ModelLoadError(f"model {name!r}: give the {what}, a loader or a path")
    return loader()


class CallableAdapter(Adapter):
    """Any callable ``scores = f(batch)``."""

    def __init__(
        self,
        name: str,
        fn: Callable[[Any], Any] | None = None,
        *,
        loader: Callable[[], Callable[[Any], Any]] | None = None,
        preprocess: Hook | None = None,
        postprocess: Hook | None = None,
    ) -> None:
        super().__init__(name, preprocess=preprocess, postprocess=postprocess)
        self._fn = fn
        self._loader = loader

    def _load(self) -> None:
        fn = _build(self.name, self._fn, self._loader, "callable")
        if not callable(fn):
            raise ModelLoadError(f"model {self.name!r}: expected a callable, got {type(fn).__name__}")
        self._fn = fn

    def _run(self, x: Any) -> Any:
        assert self._fn is not None
        return self._fn(x)


class TorchAdapter(Adapter):
    """A PyTorch ``nn.Module``: eval mode, ``torch.inference_mode``, a device, an optional thread count."""

    framework = "torch"

    def __init__(
        self,
        name: str,
        module: Any = None,
        *,
        loader: Callable[[], Any] | None = None,
        path: str | Path | None = None,
        device: str = "cpu",
        threads: int | None = None,
        preprocess: Hook | None = None,
        postprocess: Hook | None = None,
    ) -> None:
        super().__init__(name, preprocess=preprocess, postprocess=postprocess)
        self.module = module
        self._loader = loader
        self.path = None if path is None else Path(path)
        self.device = device
        self.threads = threads
        self._torch: Any = None

    def _load(self) -> None:
        torch = require("torch", model=self.name)
        self._torch = torch
        if self.threads is not None:
            torch.set_num_threads(int(self.threads))
        if self.module is None and self.path is not None:
            if not self.path.is_file():
                raise ModelLoadError(f"model {self.name!r}: no such file {self.path}")
            try:  # TorchScript first (self-contained); else a whole pickled module
                self.module = torch.jit.load(str(self.path), map_location=self.device)
            except RuntimeError:
                self.module = torch.load(str(self.path), map_location=self.device, weights_only=False)
        module = _build(self.name, self.module, self._loader, "module")
        if not isinstance(module, torch.nn.Module):
            raise ModelLoadError(f"model {self.name!r}: expected a torch.nn.Module, got {type(module).__name__}")
        self.module = module.to(self.device).eval()

    def _tensor(self, x: Any) -> Any:
        torch = self._torch
        if isinstance(x, torch.Tensor):
            return x.to(self.device)
        arr = np.asarray(x)
        if arr.dtype.kind == "f":
            arr = arr.astype(np.float32, copy=False)
        return torch.as_tensor(arr, device=self.device)

    def _run(self, x: Any) -> Any:
        torch = self._torch
        with torch.inference_mode():
            if isinstance(x, Mapping):
                out = self.module(**{k: self._tensor(v) for k, v in x.items()})
            else:
                out = self.module(self._tensor(x))
            out = getattr(out, "logits", out)  # Hugging Face outputs carry logits
            return out.detach().float().cpu().numpy()

    def memory_mb(self) -> float | None:
        if self.module is None:
            return None
        return _torch_bytes(self.module) / 1e6


def _torch_bytes(module: Any) -> int:
    tensors = [*module.parameters(), *module.buffers()]
    return int(sum(t.numel() * t.element_size() for t in tensors))


class SklearnAdapter(Adapter):
    """A scikit-learn estimator (or pipeline) with ``predict_proba``; or a pickle file of one."""

    framework = "sklearn"

    def __init__(
        self,
        name: str,
        estimator: Any = None,
        *,
        loader: Callable[[], Any] | None = None,
        path: str | Path | None = None,
        preprocess: Hook | None = None,
        postprocess: Hook | None = None,
    ) -> None:
        super().__init__(name, preprocess=preprocess, postprocess=postprocess)
        self.estimator = estimator
        self._loader = loader
        self.path = None if path is None else Path(path)

    def _load(self) -> None:
        if self.estimator is None and self.path is not None:
            if not self.path.is_file():
                raise ModelLoadError(f"model {self.name!r}: no such file {self.path}")
            with self.path.open("rb") as f:
                self.estimator = pickle.load(f)
        est = _build(self.name, self.estimator, self._loader, "estimator")
        if not callable(getattr(est, "predict_proba", None)):
            raise ModelLoadError(f"model {self.name!r}: {type(est).__name__} has no predict_proba")
        self.estimator = est

    def _run(self, x: Any) -> Any:
        return self.estimator.predict_proba(x)

    def memory_mb(self) -> float | None:
        if self.estimator is None:
            return None
        return len(pickle.dumps(self.estimator)) / 1e6


_ORT_DTYPES = {
    "tensor(float)": np.float32,
    "tensor(double)": np.float64,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
    "tensor(bool)": np.bool_,
}


class OnnxAdapter(Adapter):
    """An ONNX Runtime inference session on a ``.onnx`` file.

    ``preprocess`` may return one array (fed to the first input) or a mapping of input name to array (inputs
    the model does not declare are dropped, so one tokenizer output fits models with and without
    ``token_type_ids``). ``output`` picks the output by index or name.
    """

    framework = "onnx"

    def __init__(
        self,
        name: str,
        path: str | Path,
        *,
        threads: int | None = None,
        output: int | str = 0,
        providers: Sequence[str] = ("CPUExecutionProvider",),
        preprocess: Hook | None = None,
        postprocess: Hook | None = None,
    ) -> None:
        super().__init__(name, preprocess=preprocess, postprocess=postprocess)
        self.path = Path(path)
        self.threads = threads
        self.output = output
        self.providers = tuple(providers)
        self.session: Any = None

    def _load(self) -> None:
        ort = require("onnxruntime", model=self.name)
        if not self.path.is_file():
            raise ModelLoadError(f"model {self.name!r}: no such file {self.path}")
        opts = ort.SessionOptions()
        if self.threads is not None:
            opts.intra_op_num_threads = int(self.threads)
            opts.inter_op_num_threads = 1
        self.session = ort.InferenceSession(str(self.path), sess_options=opts, providers=list(self.providers))
        self._inputs = {i.name: _ORT_DTYPES.get(i.type, np.float32) for i in self.session.get_inputs()}
        outs = [o.name for o in self.session.get_outputs()]
        self._output = outs[self.output] if isinstance(self.output, int) else self.output

    def _run(self, x: Any) -> Any:
        if isinstance(x, Mapping):
            feed: dict[str, np.ndarray] = {
                k: np.asarray(v, dtype=self._inputs[k]) for k, v in x.items() if k in self._inputs
            }
        else:
            first, dtype = next(iter(self._inputs.items()))
            feed = {first: np.asarray(x, dtype=dtype)}
        return self.session.run([self._output], feed)[0]

    def memory_mb(self) -> float | None:
        return self.path.stat().st_size / 1e6 if self.path.is_file() else None


def _offline() -> None:
    # Never reach the hub at run time, whatever the user's environment says.
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"


class HFAdapter(Adapter):
    """A Hugging Face sequence classifier (``task="sequence-classification"``) or a text-classification
    pipeline (``task="pipeline"``), from a local directory. Inputs are a batch of strings."""

    framework = "hf"

    def __init__(
        self,
        name: str,
        path: str | Path,
        *,
        task: str = "sequence-classification",
        tokenizer: str | Path | None = None,
        max_length: int = 128,
        device: str = "cpu",
        threads: int | None = None,
        preprocess: Hook | None = None,
        postprocess: Hook | None = None,
    ) -> None:
        super().__init__(name, preprocess=preprocess, postprocess=postprocess)
        if task not in ("sequence-classification", "pipeline"):
            raise ModelLoadError(f"model {name!r}: task must be 'sequence-classification' or 'pipeline', not {task!r}")
        self.path = Path(path)
        self.task = task
        self.tokenizer_path = Path(tokenizer) if tokenizer is not None else self.path
        self.max_length = max_length
        self.device = device
        self.threads = threads
        self.model: Any = None
        self.tokenizer: Any = None
        self.pipeline: Any = None

    def _load(self) -> None:
        _offline()
        torch = require("torch", model=self.name)
        transformers = require("transformers", model=self.name)
        if not self.path.is_dir():
            raise ModelLoadError(
                f"model {self.name!r}: {self.path} is not a local model directory (cascadeserve never downloads "
                "models from the hub at run time; save the model with save_pretrained first)"
            )
        if self.threads is not None:
            torch.set_num_threads(int(self.threads))
        self.tokenizer = transformers.AutoTokenizer.from_pretrained(str(self.tokenizer_path), local_files_only=True)
        self.model = transformers.AutoModelForSequenceClassification.from_pretrained(
            str(self.path), local_files_only=True
        )
        self.model.to(self.device).eval()
        self._torch = torch
        if self.task == "pipeline":
            self.pipeline = transformers.pipeline(
                "text-classification", model=self.model, tokenizer=self.tokenizer, device=self.device, top_k=None
            )

    def _run(self, x: Any) -> Any:
        texts = [str(t) for t in x]
        if self.pipeline is not None:
            label2id = {str(k): int(v) for k, v in self.model.config.label2id.items()}
            rows = self.pipeline(texts, truncation=True, max_length=self.max_length)
            out = np.zeros((len(texts), len(label2id)), dtype=np.float64)
            for i, row in enumerate(rows):
                for item in row:
                    out[i, label2id[str(item["label"])]] = float(item["score"])
            return out
        enc = self.tokenizer(texts, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt")
        with self._torch.inference_mode():
            logits = self.model(**{k: v.to(self.device) for k, v in enc.items()}).logits
        return logits.float().cpu().numpy()

    def memory_mb(self) -> float | None:
        return None if self.model is None else _torch_bytes(self.model) / 1e6
