"""stoker feeding the transformers Trainer.

    accelerate launch --multi_gpu --num_processes 2 examples/hf_trainer.py DATASET OUT
    (or torchrun --nproc_per_node 2, or plain python for one process)

The Trainer batches by itself (per_device_train_batch_size, a data
collator), so it is given ``stoker.torch.Samples``: single samples, read by
stoker in large batches in its own threads.  The Trainer prepares its
DataLoader with Accelerate, which dispatches an iterable dataset's batches
from process 0; stoker reads the whole epoch there (see
examples/accelerate_loop.py).  The model records the ids it trained on,
one JSON line a step in OUT/rankR.jsonl.
"""
import gc
import json
import os
import sys

import torch
from transformers import Trainer, TrainingArguments

import stoker.torch


class Model(torch.nn.Module):
    def __init__(self, out):
        super().__init__()
        self.net = torch.nn.Linear(3, 1)
        self.out = out

    def forward(self, x, id, labels=None):
        rank = int(os.environ.get("RANK", 0))
        with open(os.path.join(self.out, f"rank{rank}.jsonl"), "a") as f:
            f.write(json.dumps({"ids": id.tolist(), "xsum": x.sum((1, 2)).tolist()}) + "\n")
        y = self.net(x.mean(1))
        return {"loss": y.pow(2).mean(), "logits": y}


def train(path, out):
    """Trains; returns the run's Accelerator, with the Trainer gone."""
    args = TrainingArguments(output_dir=os.path.join(out, "run"), per_device_train_batch_size=8,
                             num_train_epochs=2, use_cpu=True, report_to=[], save_strategy="no",
                             dataloader_num_workers=int(os.environ.get("WORKERS", 0)),
                             logging_strategy="no", disable_tqdm=True)
    data = stoker.torch.Samples(path, shuffle="random", seed=7, read_batch=32)
    trainer = Trainer(model=Model(out), args=args, train_dataset=data)
    trainer.train()
    return trainer.accelerator


def main():
    path, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    accelerator = train(path, out)
    # The end, in this order (examples/accelerate_loop.py says why): the
    # Trainer and its DDP model freed, then the process group destroyed.
    # The Trainer lives in train()'s frame, which is gone once it returns;
    # `del trainer` here would not do: during training something takes a
    # snapshot of the frame's locals (frame.f_locals), and that snapshot
    # keeps the Trainer alive until the function returns, after
    # end_training(), where the DDP model's release could hang the process.
    gc.collect()
    accelerator.free_memory()
    accelerator.end_training()


if __name__ == "__main__":
    main()
