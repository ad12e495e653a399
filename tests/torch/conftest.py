"""Fixtures of pyrms.torch's tests. torch is imported inside them, never here: this directory's CPU-only
tests (test_torch_import.py) check what importing pyrms pulls in, and collect where torch is absent."""
import zlib

import pytest


@pytest.fixture
def gen(request):
    """A CUDA generator seeded per test id, so a failure reproduces."""
    import torch

    return torch.Generator(device="cuda").manual_seed(zlib.crc32(request.node.nodeid.encode()))


@pytest.fixture
def dynamo():
    """torch._dynamo, reset before and after the test (its recompile limits and caches span tests)."""
    import torch

    torch._dynamo.reset()
    yield torch._dynamo
    torch._dynamo.reset()
