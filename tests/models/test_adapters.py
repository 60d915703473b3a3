"""Every adapter on a tiny real model: torch, scikit-learn, ONNX (exported from the torch model), Hugging Face
(a tiny BertConfig model saved to a temp dir, so nothing is downloaded), and a plain callable."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from cascadeserve.models import (
    CallableAdapter,
    HFAdapter,
    MissingExtraError,
    ModelLoadError,
    OnnxAdapter,
    SklearnAdapter,
    TorchAdapter,
    require,
)

torch = pytest.importorskip("torch")

X = np.random.default_rng(0).normal(size=(10, 4)).astype(np.float32)


def tiny_torch() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))


def test_callable_adapter() -> None:
    a = CallableAdapter("f", lambda b: np.tile([0.2, 0.8], (len(b), 1)))
    assert a.predict(X).shape == (10, 2)
    assert a(X[:3]).shape == (3, 2)  # adapters are plain callables for the runtime
    assert a.memory_mb() is None


def test_torch_adapter_eval_inference_mode_threads_and_memory() -> None:
    module = tiny_torch().train()
    a = TorchAdapter("t", module, threads=1)
    scores = a.predict(X)
    with torch.no_grad():
        expected = module(torch.as_tensor(X)).numpy()
    np.testing.assert_allclose(scores, expected, rtol=1e-5, atol=1e-6)
    assert not module.training  # load() put it in eval mode
    assert torch.get_num_threads() == 1
    n_params = sum(p.numel() for p in module.parameters())
    assert a.memory_mb() == pytest.approx(n_params * 4 / 1e6)


def test_torch_adapter_torchscript_path(tmp_path: Path) -> None:
    module = tiny_torch().eval()
    path = tmp_path / "m.pt"
    torch.jit.script(module).save(str(path))
    a = TorchAdapter("ts", path=path)
    np.testing.assert_allclose(a.predict(X), module(torch.as_tensor(X)).detach().numpy(), rtol=1e-5, atol=1e-6)


def test_sklearn_adapter_object_and_pickle(tmp_path: Path) -> None:
    import pickle

    from sklearn.linear_model import LogisticRegression

    y = np.arange(10) % 3
    est = LogisticRegression(max_iter=500).fit(X, y)
    a = SklearnAdapter("lr", est)
    np.testing.assert_allclose(a.predict(X), est.predict_proba(X))
    assert a.memory_mb() is not None and a.memory_mb() > 0
    path = tmp_path / "lr.pkl"
    path.write_bytes(pickle.dumps(est))
    np.testing.assert_allclose(SklearnAdapter("lr2", path=path).predict(X), est.predict_proba(X))


def test_sklearn_adapter_without_predict_proba_names_the_model() -> None:
    with pytest.raises(ModelLoadError, match=r"model 'svm'.*predict_proba"):
        SklearnAdapter("svm", object()).load()


def test_onnx_adapter_on_an_exported_torch_model(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    module = tiny_torch().eval()
    path = tmp_path / "tiny.onnx"
    torch.onnx.export(
        module,
        (torch.as_tensor(X[:2]),),
        str(path),
        input_names=["x"],
        output_names=["scores"],
        dynamic_axes={"x": {0: "n"}, "scores": {0: "n"}},
        dynamo=False,
    )
    a = OnnxAdapter("onnx", path, threads=1)
    with torch.no_grad():
        expected = module(torch.as_tensor(X)).numpy()
    np.testing.assert_allclose(a.predict(X.astype(np.float64)), expected, rtol=1e-4, atol=1e-5)
    assert a.memory_mb() == pytest.approx(path.stat().st_size / 1e6)


def _tiny_bert(tmp_path: Path) -> Path:
    transformers = pytest.importorskip("transformers")
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "good", "bad", "movie", "the", "is", "very"]
    (tmp_path / "vocab.txt").write_text("\n".join(words) + "\n")
    tok = transformers.BertTokenizer(str(tmp_path / "vocab.txt"))
    cfg = transformers.BertConfig(
        vocab_size=len(words),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=32,
        num_labels=3,
    )
    torch.manual_seed(0)
    model = transformers.BertForSequenceClassification(cfg)
    out = tmp_path / "bert"
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


@pytest.mark.parametrize("task", ["sequence-classification", "pipeline"])
def test_hf_adapter_on_a_tiny_local_bert(tmp_path: Path, task: str) -> None:
    path = _tiny_bert(tmp_path)
    texts = ["the movie is very good", "bad movie", "good"]
    a = HFAdapter("bert", path, task=task, max_length=16, threads=1)
    scores = a.predict(texts)
    assert scores.shape == (3, 3)
    if task == "pipeline":
        np.testing.assert_allclose(scores.sum(axis=1), 1.0, rtol=1e-5)
    ref = HFAdapter("ref", path).predict(texts)
    np.testing.assert_allclose(
        np.exp(ref) / np.exp(ref).sum(1, keepdims=True) if task == "pipeline" else ref, scores, rtol=1e-4, atol=1e-5
    )
    assert a.memory_mb() is not None and a.memory_mb() > 0


def test_hf_adapter_never_goes_to_the_hub(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match=r"model 'remote'.*not a local model directory.*never downloads"):
        HFAdapter("remote", tmp_path / "bert-base-uncased").load()


def test_a_model_that_fails_to_load_names_the_model_and_the_reason() -> None:
    def boom() -> None:
        raise OSError("weights.bin is truncated")

    with pytest.raises(ModelLoadError, match=r"model 'broken' failed to load: OSError: weights.bin is truncated"):
        CallableAdapter("broken", loader=boom).load()  # type: ignore[arg-type]


def test_scores_of_the_wrong_shape_name_the_model() -> None:
    a = CallableAdapter("flat", lambda b: np.zeros(len(b)))
    with pytest.raises(ModelLoadError, match=r"model 'flat': expected scores of shape \[10, classes>=2\]"):
        a.predict(X)


def test_missing_framework_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # an import of a None entry raises ImportError
    with pytest.raises(MissingExtraError, match=r"model 'm': onnxruntime is not installed.*cascadeserve\[onnx\]"):
        require("onnxruntime", model="m")
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(MissingExtraError, match=r"cascadeserve\[torch\]"):
        TorchAdapter("t", loader=lambda: None).load()
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(MissingExtraError, match=r"cascadeserve\[hf\]"):
        require("transformers")
