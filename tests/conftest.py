import pytest
import torch


@pytest.fixture
def one_torch_thread():
    """Small models: one torch thread is faster on the 2-core CI box (no oversubscription)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
