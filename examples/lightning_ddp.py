"""stoker in a LightningDataModule, trained with DDP.

    python examples/lightning_ddp.py DATASET OUT [--devices 2] [--epochs 2]
        [--workers 2] [--stop-at STEP] [--resume CKPT]

Nothing here tells stoker the rank: Lightning's launcher starts one process
a device with WORLD_SIZE and LOCAL_RANK (no RANK) and initialises the
process group before the first batch; stoker.torch.Dataset finds the rank
when an epoch starts (from the group), so every process reads its own share,
a new order every epoch, with no set_epoch hook to call.  The DataLoader is
torchdata's StatefulDataLoader: Lightning saves its state in every
checkpoint, and a run resumed from one mid-epoch goes on with the very next
batch.

The model records the ids of the samples of every step, a JSON line each
in OUT/rankR.jsonl (the tests compare them).  --stop-at N raises
after N steps, with a checkpoint saved at every step, as a crash would
leave; --resume CKPT goes on from one.
"""
import argparse
import json
import os

import lightning.pytorch as pl
import torch
from torchdata.stateful_dataloader import StatefulDataLoader

import stoker.torch


class StokerData(pl.LightningDataModule):
    def __init__(self, path, batch_size=8, workers=2):
        super().__init__()
        self.path, self.batch_size, self.workers = path, batch_size, workers
        self.train = None

    def setup(self, stage):
        # Made here or in __init__, before or after the process group: the
        # rank is found when an epoch starts.
        self.train = stoker.torch.Dataset(self.path, self.batch_size, shuffle="random", seed=7)

    def train_dataloader(self):
        return StatefulDataLoader(self.train, batch_size=None, num_workers=self.workers,
                                  persistent_workers=self.workers > 0)


class Model(pl.LightningModule):
    def __init__(self, out, stop_at=None):
        super().__init__()
        self.net = torch.nn.Linear(3, 1)
        self.out, self.stop_at = out, stop_at

    def training_step(self, batch, i):
        if self.stop_at is not None and self.global_step >= self.stop_at:
            raise SystemExit(3)   # a crash after the checkpoint of step stop_at
        with open(os.path.join(self.out, f"rank{self.global_rank}.jsonl"), "a") as f:
            f.write(json.dumps({"epoch": self.current_epoch, "step": self.global_step,
                                "world": self.trainer.world_size,
                                "ids": batch["id"].tolist(),
                                "xsum": batch["x"].sum((1, 2)).tolist()}) + "\n")
        x = batch["x"].reshape(len(batch["id"]), -1, 3).mean(1)
        return self.net(x).pow(2).mean()

    def on_train_start(self):
        with open(os.path.join(self.out, f"rank{self.global_rank}.info"), "w") as f:
            f.write(repr(self.trainer.datamodule.train))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dataset")
    ap.add_argument("out")
    ap.add_argument("--devices", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--stop-at", type=int)
    ap.add_argument("--resume")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    ckpt = pl.callbacks.ModelCheckpoint(dirpath=os.path.join(a.out, "ckpt"),
                                        every_n_train_steps=1, save_top_k=-1,
                                        filename="{step}")
    trainer = pl.Trainer(accelerator="cpu", devices=a.devices, strategy="ddp",
                         max_epochs=a.epochs, callbacks=[ckpt], logger=False,
                         enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Model(a.out, a.stop_at), datamodule=StokerData(a.dataset, workers=a.workers),
                ckpt_path=a.resume)


if __name__ == "__main__":
    main()
