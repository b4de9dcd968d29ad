"""The Hugging Face export of the final policy: fp32 as trained, or cast (bf16, callbacks=sweep)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
from safetensors import safe_open
from transformers import AutoModelForCausalLM

from mintrl.training.callbacks.export import HFExport, cast_state_dict


def test_bf16_export_halves_the_weights_and_loads(tiny_model, tmp_path):
    module = SimpleNamespace(policy=tiny_model, tokenizer=None)
    out32 = HFExport(str(tmp_path / "fp32")).export(None, module)
    out16 = HFExport(str(tmp_path / "bf16"), dtype="bfloat16").export(None, module)
    assert next(tiny_model.parameters()).dtype == torch.float32  # the live policy is not cast
    with safe_open(str(out16 / "model.safetensors"), framework="pt") as f:
        assert {f.get_tensor(k).dtype for k in f.keys()} == {torch.bfloat16}
    size32, size16 = ((o / "model.safetensors").stat().st_size for o in (out32, out16))
    assert size16 < 0.55 * size32
    assert json.loads((out16 / "config.json").read_text())["dtype"] == "bfloat16"
    loaded = AutoModelForCausalLM.from_pretrained(out16)
    ids = torch.tensor([[1, 2, 3]])
    with torch.no_grad():
        expected = tiny_model(ids).logits
        assert torch.allclose(loaded.float()(ids).logits, expected, atol=0.05)
    assert not list(tmp_path.glob("*.tmp-*")), "no temporary folder left"


def test_cast_keeps_tied_tensors_shared_and_integer_buffers():
    weight = torch.randn(4, 2)
    cast = cast_state_dict({"embed": weight, "head": weight, "steps": torch.arange(3)}, "bfloat16")
    assert cast["embed"] is cast["head"] and cast["embed"].dtype == torch.bfloat16
    assert cast["steps"].dtype == torch.int64


@pytest.mark.parametrize("bad", ["int8", "long", "nonsense", torch.bfloat16])
def test_export_dtype_must_be_a_floating_torch_dtype_name(bad):
    with pytest.raises(ValueError, match="floating-point torch dtype"):
        HFExport(dtype=bad)
