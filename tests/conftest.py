import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread():
    """Tests share 2 cores with other processes: one torch thread each (see FIELD-NOTES)."""
    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny():
    """The zoo's tiny-add model and tokenizer (built once per machine, then cached)."""
    from node.config import ModelConfig
    from node.models.loading import load_model

    torch.set_num_threads(1)
    loaded = load_model(ModelConfig(name="tiny-add"))
    return loaded.model, loaded.tokenizer
