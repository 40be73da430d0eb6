"""bfloat16 on a CPU without bfloat16 instructions: PyTorch emulates its matmuls (41x slower than
float32 for a 2048x256x1024 product on an AVX2 machine), so a run says so before it starts."""

import pytest

from src.run import preflight
from src.run.cli import compose


def test_the_private_probe_the_warning_uses_is_still_in_torch():
    assert isinstance(preflight.cpu_has_bfloat16(), bool)  # torch.ops.mkldnn._is_mkldnn_bf16_supported


@pytest.mark.parametrize(
    "overrides,said",
    [
        (["experiment=cpu_speedrun_modern"], "trainer.precision=bf16-mixed and optimizer.ns_dtype=bfloat16"),
        (["trainer.precision=bf16-mixed"], "trainer.precision=bf16-mixed on a CPU"),
        (["trainer.precision=16-mixed"], "trainer.precision=16-mixed on a CPU"),  # Lightning's bf16 on a CPU
        (["optimizer=muon", "optimizer.ns_dtype=bfloat16"], "optimizer.ns_dtype=bfloat16 on a CPU"),
    ],
)
def test_bfloat16_on_a_cpu_without_it_is_named_with_its_fix(overrides, said, monkeypatch, capsys):
    monkeypatch.setattr(preflight, "cpu_has_bfloat16", lambda: False)
    preflight.warn_slow_bfloat16(compose("train", [*overrides, "trainer.accelerator=cpu"]))
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("warning: ") and said in err, err
    assert "trainer.precision=32-true" in err or "optimizer.ns_dtype=float32" in err


@pytest.mark.parametrize(
    "overrides,has_bfloat16",
    [
        (["experiment=cpu_speedrun_modern"], True),  # the CPU multiplies bfloat16 itself
        ([], False),  # float32: nothing to say
    ],
)
def test_nothing_is_said_where_bfloat16_is_fast_or_unused(overrides, has_bfloat16, monkeypatch, capsys):
    monkeypatch.setattr(preflight, "cpu_has_bfloat16", lambda: has_bfloat16)
    preflight.warn_slow_bfloat16(compose("train", [*overrides, "trainer.accelerator=cpu"]))
    assert capsys.readouterr().err == ""
