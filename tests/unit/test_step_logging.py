"""Per-step scalars (training/step_logging.py): a key omitted at a step has no point there; with
Lightning's ``log_dict`` it is written again with its last value (seen here, then fixed)."""

import lightning.pytorch as L
import pytest
import torch
from lightning.pytorch.loggers import TensorBoardLogger

from mintrl.analysis.tensorboard import load_scalars
from mintrl.training.step_logging import log_step


class Toy(L.LightningModule):
    """Logs ``b`` every step and ``a`` only at the first one (manual optimisation, as mintrl)."""

    def __init__(self, direct: bool):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))
        self.automatic_optimization = False
        self.direct = direct

    def training_step(self, batch, index):
        step = self.trainer.global_step
        metrics = {"b": float(step)} | ({"a": 5.0} if step == 0 else {})
        if self.direct:
            log_step(self, metrics)
        else:
            self.log_dict(metrics, on_step=True, on_epoch=False, batch_size=1)
        self.optimizers().step()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self):  # one epoch of 6 batches, as a mintrl run streams its steps
        return torch.utils.data.DataLoader(torch.zeros(6, 1), batch_size=1)


def _scalars(tmp_path, direct: bool) -> dict:
    trainer = L.Trainer(
        max_steps=3,
        logger=TensorBoardLogger(str(tmp_path)),
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        log_every_n_steps=1,
    )
    trainer.fit(Toy(direct))
    return load_scalars(tmp_path)


@pytest.mark.parametrize("direct", [False, True])
def test_an_omitted_key_has_no_point_at_that_step(tmp_path, direct):
    scalars = _scalars(tmp_path, direct)
    assert scalars["b"] == [(0, 0.0), (1, 1.0), (2, 2.0)]  # the same steps either way
    if direct:
        assert scalars["a"] == [(0, 5.0)]
    else:  # Lightning's result collection: the first value again at steps 1 and 2
        assert scalars["a"] == [(0, 5.0), (1, 5.0), (2, 5.0)]
