"""stoker with Hugging Face Accelerate, as its users write the loop.

    accelerate launch --multi_gpu --num_processes 2 examples/accelerate_loop.py \
        DATASET OUT [--workers 2] [--own-share]

(On a machine without GPUs, ACCELERATE_USE_CPU=true in the environment
makes that two CPU processes over gloo.)

By default the DataLoader goes through ``accelerator.prepare()`` with the
model and the optimizer, as Accelerate's examples do.  For an iterable
dataset Accelerate then dispatches: process 0 iterates the DataLoader, and
each batch it reads is cut into a part for every process.  stoker sees the
dispatcher and has process 0 read the whole epoch (not its rank's share,
which the processes would then split again): every sample once an epoch,
but all of it read by one process and sent to the others.

With ``--own-share`` the DataLoader stays out of ``prepare()`` (the model
and optimizer still go through it): each process reads only its own share,
with its own threads, and moves its batches to ``accelerator.device``; for
a GPU, ``stoker.torch.Dataset(..., device=accelerator.device)`` copies them
there asynchronously instead.  That is the faster way on several GPUs.

Nothing tells stoker the rank: ``accelerate launch`` sets RANK and
WORLD_SIZE.  Each process records the sample ids of its steps in
OUT/rankR.jsonl (the tests compare them).
"""
import argparse
import json
import os

import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader

import stoker.torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dataset")
    ap.add_argument("out")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--own-share", action="store_true")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    accelerator = Accelerator()
    ds = stoker.torch.Dataset(a.dataset, 8, shuffle="random", seed=7)
    loader = DataLoader(ds, batch_size=None, num_workers=a.workers)
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    if a.own_share:
        model, opt = accelerator.prepare(model, opt)
    else:
        model, opt, loader = accelerator.prepare(model, opt, loader)
    rank = accelerator.process_index
    with open(os.path.join(a.out, f"rank{rank}.jsonl"), "w") as f:
        for epoch in range(a.epochs):
            for step, batch in enumerate(loader):
                batch = {k: v.to(accelerator.device) for k, v in batch.items()}
                f.write(json.dumps({"epoch": epoch, "step": step,
                                    "ids": batch["id"].tolist(),
                                    "xsum": batch["x"].sum((1, 2)).tolist()}) + "\n")
                x = batch["x"].reshape(len(batch["id"]), -1, 3).mean(1)
                loss = model(x).pow(2).mean()
                accelerator.backward(loss)
                opt.step()
                opt.zero_grad()
    accelerator.wait_for_everyone()
    # The end, in this order.  end_training() destroys the process group: a
    # gloo group left to the interpreter's exit can abort the process while
    # its threads still run ("terminate called without an active exception").
    # Before it, free_memory() drops the prepared (DDP) model, so that it is
    # not the model that frees the group last: freed there, the group waits
    # for its threads while holding the GIL that a thread may need (a hang).
    del model, opt, loader
    accelerator.free_memory()
    accelerator.end_training()


if __name__ == "__main__":
    main()
