"""pyrms.torch.gated_rms_norm without a GPU: under torch.compile a group size that changes between calls becomes a
symbolic int, which the custom op's fake implementation takes (specialized to its value: the kernels are planned
per group size) instead of refusing it as not an int."""
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")

import pyrms.torch as pt  # noqa: E402


def test_a_group_size_that_changes_between_calls_traces():
    torch._dynamo.reset()
    graphs = []

    def capture(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    def f(x, z, group_size):
        return pt.gated_rms_norm(x, z, None, 1e-5, group_size=group_size)

    compiled = torch.compile(f, backend=capture, fullgraph=True)
    x, z = torch.randn(5, 64).to(torch.bfloat16), torch.randn(5, 64).to(torch.bfloat16)
    for group_size in (16, 32, 64):  # the second call on makes group_size symbolic
        with pytest.raises(ValueError, match="x is a cpu tensor"):  # traced; the launch then refuses CPU tensors
            compiled(x, z, group_size)
    assert len(graphs) >= 2 and all("torch.ops.pyrms.gated_rms_norm.default(" in g.code for g in graphs)
    with pytest.raises(Exception, match="hidden_size=64 is not a multiple of group_size=24"):
        compiled(x, z, 24)
    torch._dynamo.reset()
