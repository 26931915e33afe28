"""examples/train_dlrm.py at the README's settings learns: on IKJTs and on
KJTs its final loss is below the base rate it prints (the loss of the best
constant prediction on the same samples). Run with whatever python runs the
tests: Debian's (torch.nn.EmbeddingBag) in ctest python_binding, the
TorchRec environment's (EmbeddingBagCollection under DistributedModelParallel,
TrainPipelineSparseDist) in ctest python_torchrec."""

import os
import re
import subprocess
import sys

import pytest

from procs import BINARY, SCALE

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

pytestmark = pytest.mark.skipif(
    not BINARY or not os.path.exists(BINARY), reason="needs SLUICE_BINARY"
)


def test_train_dlrm_learns_at_readme_settings():
    out = subprocess.run(
        [sys.executable, os.path.join(ROOT, "examples", "train_dlrm.py"), "--sluice", BINARY,
         "--rows", "200000", "--steps", "300"],
        capture_output=True, text=True, timeout=300 * SCALE,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    finals = {}
    for name, steps, final, base in re.findall(
        r"^(ikjt|kjt)\s+(\d+) steps .* last 20: ([0-9.]+)\s+base rate ([0-9.]+): learned",
        out.stdout, re.M,
    ):
        assert int(steps) == 300
        assert float(final) < float(base)
        finals[name] = float(final)
    assert set(finals) == {"ikjt", "kjt"}, out.stdout
    try:
        import sluice.torchrec  # noqa: F401

        want = "torchrec EmbeddingBagCollection"
    except ImportError:
        want = "torch.nn.EmbeddingBag per feature"
    assert "embeddings: " + want in out.stdout
