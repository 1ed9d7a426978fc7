"""stoker inside the frameworks people train with, as their users write them:
the rank found (never guessed) from what launched the process, Lightning's
DDP launcher (which sets WORLD_SIZE and LOCAL_RANK, not RANK), a Dataset
made before init_process_group, Accelerate's prepare() and the transformers
Trainer.  Every test compares the sample ids each process trained on."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import stoker
import stoker.torch
from stoker import _ranks

pytestmark = pytest.mark.usefixtures("no_dist_env")

ROOT = Path(__file__).resolve().parents[2]
N = 240


@pytest.fixture
def id_ds(tmp_path):
    """N records: `id` (int64, the record number), `x` (float32 [5, 3])."""
    path = tmp_path / "ids.stk"
    stoker.write(path, {"id": np.arange(N, dtype=np.int64),
                        "x": np.arange(N * 15, dtype=np.float32).reshape(N, 5, 3)})
    return path


def _clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in _ranks.VARIABLES}
    env.update({k: str(v) for k, v in extra.items()})
    return env


# ---- where the rank comes from -------------------------------------------

CASES = [
    ({}, (0, 1, "default (one process)")),
    ({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1"}, (3, 4, "RANK/WORLD_SIZE")),
    # Lightning's launcher: no RANK.
    ({"WORLD_SIZE": "2", "LOCAL_RANK": "1", "NODE_RANK": "0"},
     (1, 2, "LOCAL_RANK/WORLD_SIZE (node 0)")),
    ({"WORLD_SIZE": "8", "LOCAL_RANK": "1", "NODE_RANK": "1", "LOCAL_WORLD_SIZE": "4"},
     (5, 8, "NODE_RANK/LOCAL_RANK/LOCAL_WORLD_SIZE")),
    ({"SLURM_PROCID": "2", "SLURM_STEP_NUM_TASKS": "3", "SLURM_NTASKS": "3"},
     (2, 3, "Slurm (SLURM_PROCID/SLURM_STEP_NUM_TASKS)")),
    # A batch script's own process is no task of a step: one process.
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "4"}, (0, 1, "default (one process)")),
    ({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"},
     (1, 2, "Open MPI (OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE)")),
    ({"PMI_RANK": "5", "PMI_SIZE": "6"}, (5, 6, "MPI (PMI_RANK/PMI_SIZE)")),
    # torchrun inside one Slurm task a node: another world, left alone.
    ({"RANK": "5", "WORLD_SIZE": "8", "SLURM_PROCID": "1", "SLURM_STEP_NUM_TASKS": "2"},
     (5, 8, "RANK/WORLD_SIZE")),
    # The first source of the world size has no rank; another of that world does.
    ({"WORLD_SIZE": "2", "PMI_RANK": "1", "PMI_SIZE": "2"}, (1, 2, "MPI (PMI_RANK/PMI_SIZE)")),
    ({"WORLD_SIZE": "1"}, (0, 1, "WORLD_SIZE without RANK or LOCAL_RANK")),
]


@pytest.mark.parametrize("env,want", CASES)
def test_rank_from_each_launcher(env, want):
    assert tuple(_ranks.resolve(env=env)) == want


REFUSED = [
    ({"WORLD_SIZE": "2"}, "rank is not known"),
    ({"WORLD_SIZE": "4", "LOCAL_RANK": "1", "NODE_RANK": "1"}, "processes per node unknown"),
    ({"RANK": "1", "WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2"},
     "ambiguous.*rank 1 of 2.*rank 0 of 2"),
    ({"RANK": "3"}, "world size is not known"),
    ({"WORLD_SIZE": "4", "PMI_RANK": "1", "PMI_SIZE": "2"}, "rank is not known"),
    ({"WORLD_SIZE": "two"}, "WORLD_SIZE='two'"),
]


@pytest.mark.parametrize("env,match", REFUSED)
def test_an_unknown_or_ambiguous_rank_raises(env, match):
    with pytest.raises(stoker.InvalidArgument, match=match):
        _ranks.resolve(env=env)


def test_arguments_win_and_fill_in():
    env = {"RANK": "1", "WORLD_SIZE": "2"}
    assert tuple(_ranks.resolve(0, 4, env=env)) == (0, 4, "arguments")
    assert _ranks.resolve(world_size=2, env=env)[:2] == (1, 2)
    assert _ranks.resolve(rank=0, env=env)[:2] == (0, 2)
    with pytest.raises(stoker.InvalidArgument, match="no rank"):
        _ranks.resolve(world_size=3, env=env)
    assert _ranks.resolve(world_size=1, env=env)[:2] == (0, 1)


def test_loader_says_where_its_rank_came_from(id_ds, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    with stoker.Loader(id_ds, 8, shuffle="sequential") as ld:
        info = ld.info()
        assert (info["rank"], info["world_size"]) == (1, 2)
        assert info["rank_source"] == "LOCAL_RANK/WORLD_SIZE (node 0)"
        assert "rank_source='LOCAL_RANK/WORLD_SIZE (node 0)'" in repr(ld)
        ids = np.concatenate([b["id"] for b in ld])
    # The second of two streams: the second half, in sequential order.
    assert ids.tolist() == list(range(N // 2, N))
    monkeypatch.delenv("LOCAL_RANK")
    with pytest.raises(stoker.InvalidArgument, match="rank is not known"):
        stoker.Loader(id_ds, 8)
    ds = stoker.torch.Dataset(id_ds, 8)       # found at the first iteration, not here
    with pytest.raises(stoker.InvalidArgument, match="rank is not known"):
        next(iter(ds))
    assert "rank unknown" in repr(ds)


def test_a_rank_share_is_dealt_in_blocks_each_epoch(id_ds):
    """What README says of shares: dealt anew each epoch, in blocks; a
    dataset of one block keeps its shares (in a new order), finer blocks
    deal new ones."""
    def share(epoch, **kw):
        with stoker.Loader(id_ds, 8, shuffle="random", rank=0, world_size=2, epoch=epoch,
                           **kw) as ld:
            return [i for b in ld for i in b["id"].tolist()]
    one_block = [share(e) for e in range(3)]
    assert len({tuple(sorted(s)) for s in one_block}) == 1
    assert len({tuple(s) for s in one_block}) == 3
    fine = [set(share(e, block_bytes=512)) for e in range(3)]
    assert all(len(s) == N // 2 for s in fine)
    assert fine[0] != fine[1] and fine[1] != fine[2]


# ---- torch.distributed: a Dataset made before the process group ----------

GROUP_SCRIPT = r"""
import json, sys
import numpy as np
import torch.distributed as dist
import stoker, stoker.torch
from torch.utils.data import DataLoader

path, init, rank, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
ds = stoker.torch.Dataset(path, 8, shuffle="random")      # before the group
early = stoker.Loader(path, 8, shuffle="random")           # opened as 0 of 1
dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
got = {"early_info": early.info()["rank_source"]}
try:
    early.next()
except stoker.InvalidArgument as e:
    got["early_error"] = str(e)
early.close()
ds2 = stoker.torch.Dataset(path, 8, shuffle="random")
got["epochs"] = [[b["id"].tolist() for b in DataLoader(d, batch_size=None, num_workers=w)]
                 for d, w in ((ds, 0), (ds, 0), (ds2, 2), (ds2, 2))]
got["info"] = repr(ds)
json.dump(got, open(out, "w"))
dist.barrier()
dist.destroy_process_group()
"""


def test_a_dataset_made_before_init_process_group(id_ds, tmp_path):
    script = tmp_path / "group.py"
    script.write_text(GROUP_SCRIPT)
    init = f"file://{tmp_path / 'rendezvous'}"
    procs = [subprocess.Popen([sys.executable, str(script), str(id_ds), init, str(r),
                               str(tmp_path / f"r{r}.json")], env=_clean_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in (0, 1)]
    for p in procs:
        out, _ = p.communicate(timeout=240)
        assert p.returncode == 0, out
    got = [json.loads((tmp_path / f"r{r}.json").read_text()) for r in (0, 1)]
    for r, g in enumerate(got):
        assert g["early_info"] == "default (one process)"
        assert f"opened as rank 0 of 1" in g["early_error"]
        assert f"torch.distributed now says rank {r} of 2" in g["early_error"]
        assert f"rank={r} world_size=2 rank_source='torch.distributed'" in g["info"]
    for e in range(4):
        a = [i for b in got[0]["epochs"][e] for i in b]
        b = [i for b in got[1]["epochs"][e] for i in b]
        assert len(a) == len(b) == N // 2
        assert sorted(a + b) == list(range(N))
    # Without workers and with two: the same batches, and the second pass
    # is the next epoch, another order.
    for r in (0, 1):
        assert got[r]["epochs"][0] == got[r]["epochs"][2]
        assert got[r]["epochs"][1] == got[r]["epochs"][3]
        assert got[r]["epochs"][0] != got[r]["epochs"][1]


# ---- Lightning: DDP, two processes, its own launcher --------------------

def _lightning(ds, out, *args, devices=2):
    pytest.importorskip("lightning")
    cmd = [sys.executable, str(ROOT / "examples" / "lightning_ddp.py"), str(ds), str(out),
           "--devices", str(devices), *map(str, args)]
    return subprocess.run(cmd, env=_clean_env(), capture_output=True, text=True, timeout=400)


def _steps(out, rank):
    """The steps a process recorded; each sample's x (whose elements are
    id * 15 + 0..14) checked against its id."""
    steps = [json.loads(line) for line in (Path(out) / f"rank{rank}.jsonl").read_text().splitlines()]
    for s in steps:
        assert s["xsum"] == [225.0 * i + 105.0 for i in s["ids"]]
    return steps


def test_lightning_ddp_shares_epochs_and_resume(id_ds, tmp_path):
    full = tmp_path / "full"
    r = _lightning(id_ds, full, "--epochs", 2)
    assert r.returncode == 0, r.stdout + r.stderr
    steps = [_steps(full, rank) for rank in (0, 1)]
    for rank in (0, 1):
        info = (full / f"rank{rank}.info").read_text()
        assert f"rank={rank} world_size=2 rank_source='torch.distributed'" in info
        assert [s["epoch"] for s in steps[rank]] == [0] * 15 + [1] * 15
    for epoch in (0, 1):
        shares = [[i for s in steps[rank] if s["epoch"] == epoch for i in s["ids"]]
                  for rank in (0, 1)]
        # Disjoint equal shares that cover the epoch.
        assert len(shares[0]) == len(shares[1]) == N // 2
        assert sorted(shares[0] + shares[1]) == list(range(N))
    # A new order every epoch, with no set_epoch hook in the module.
    for rank in (0, 1):
        assert steps[rank][:15] != steps[rank][15:]
    # A crash after step 20 (mid-epoch 1), resumed from that checkpoint:
    # the very next batches, the run's ids exactly.
    part = tmp_path / "part"
    r = _lightning(id_ds, part, "--epochs", 2, "--stop-at", 20)
    assert r.returncode != 0
    ckpt = part / "ckpt" / "step=20.ckpt"
    assert ckpt.exists(), sorted(os.listdir(part / "ckpt"))
    r = _lightning(id_ds, part, "--epochs", 2, "--resume", ckpt)
    assert r.returncode == 0, r.stdout + r.stderr
    for rank in (0, 1):
        assert [s["ids"] for s in _steps(part, rank)] == [s["ids"] for s in steps[rank]]
        assert [s["step"] for s in _steps(part, rank)] == list(range(30))


# ---- Accelerate: accelerator.prepare(dataloader), and without it ---------

def _loader_batches(ds, epoch, rank=0, world=1):
    with stoker.Loader(ds, 8, shuffle="random", seed=7, epoch=epoch, rank=rank,
                       world_size=world) as ld:
        return [b["id"].tolist() for b in ld]


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("own_share", [False, True])
def test_accelerate_prepare_and_own_share(id_ds, tmp_path, workers, own_share):
    pytest.importorskip("accelerate")
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu",
           "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no",
           "--dynamo_backend", "no",
           # A free port of its own: tests run side by side, and two launches
           # on the default 29500 at once can meet in one rendezvous.
           "--main_process_port", "0", str(ROOT / "examples" / "accelerate_loop.py"),
           str(id_ds), str(out), "--workers", str(workers)] + (["--own-share"] if own_share else [])
    r = subprocess.run(cmd, env=_clean_env(ACCELERATE_USE_CPU="true"), capture_output=True,
                       text=True, timeout=400)
    assert r.returncode == 0, r.stdout + r.stderr
    steps = [_steps(out, rank) for rank in (0, 1)]
    for epoch in (0, 1):
        got = [[s["ids"] for s in steps[rank] if s["epoch"] == epoch] for rank in (0, 1)]
        if own_share:
            # Each process read its own share: the rank's Loader's batches.
            want = [_loader_batches(id_ds, epoch, rank, 2) for rank in (0, 1)]
        else:
            # Process 0 read the whole epoch; the dispatcher gave batch
            # 2t to process 0 and 2t + 1 to process 1 at step t.
            whole = _loader_batches(id_ds, epoch)
            want = [whole[0::2], whole[1::2]]
        assert got == want
        ids = [i for g in got for b in g for i in b]
        assert sorted(ids) == list(range(N))
    assert steps[0][:15] != steps[0][15:]


# ---- the transformers Trainer, given stoker.torch.Samples --------------

@pytest.mark.parametrize("workers", [0, 2])
def test_transformers_trainer(id_ds, tmp_path, workers):
    pytest.importorskip("transformers")
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu",
           "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no",
           "--dynamo_backend", "no", "--main_process_port", "0",
           str(ROOT / "examples" / "hf_trainer.py"), str(id_ds),
           str(out)]
    r = subprocess.run(cmd, env=_clean_env(ACCELERATE_USE_CPU="true", WORKERS=workers),
                       capture_output=True, text=True, timeout=400)
    assert r.returncode == 0, r.stdout + r.stderr
    steps = [_steps(out, rank) for rank in (0, 1)]
    assert [len(s) for s in steps] == [30, 30]     # 15 steps an epoch, 2 epochs
    for epoch in (0, 1):
        got = [[i for s in steps[rank][15 * epoch:15 * (epoch + 1)] for i in s["ids"]]
               for rank in (0, 1)]
        with stoker.Loader(id_ds, 32, shuffle="random", seed=7, epoch=epoch, rank=0,
                           world_size=1) as ld:
            whole = [i for b in ld for i in b["id"].tolist()]
        if workers == 0:
            # Process 0 reads the epoch's samples in stoker's order; the
            # dispatcher gives 8 to each process in turn.
            want = [[i for t in range(15) for i in whole[16 * t + 8 * r:16 * t + 8 * r + 8]]
                    for r in (0, 1)]
            assert got == want
        assert sorted(got[0] + got[1]) == list(range(N))
    assert steps[0][:15] != steps[0][15:]
