"""Which rank of how many this process is, and who said so.

A loader that takes the wrong rank trains every process on the same share
of the data, silently; one that takes the wrong world size skips or repeats
samples. So the rank is never guessed: it is read from what launched the
process, in this order, and the first that knows the world size decides:

1. an initialised ``torch.distributed`` process group (the group the
   gradients are reduced over: the truth whenever there is one);
2. ``RANK`` / ``WORLD_SIZE`` (torchrun, ``accelerate launch``, DeepSpeed);
   with ``WORLD_SIZE`` but no ``RANK`` (Lightning's launcher sets
   ``WORLD_SIZE``, ``NODE_RANK`` and ``LOCAL_RANK`` only), the rank is
   ``LOCAL_RANK`` on node 0 and ``NODE_RANK * LOCAL_WORLD_SIZE +
   LOCAL_RANK`` elsewhere, and an error where the processes per node are
   not known;
3. a task of a Slurm job step (``SLURM_PROCID`` of
   ``SLURM_STEP_NUM_TASKS``: srun's tasks; a batch script's own process has
   ``SLURM_NTASKS`` of the allocation without being one of its tasks, and
   taking it would read a fraction of the data);
4. MPI: Open MPI's ``OMPI_COMM_WORLD_RANK`` / ``OMPI_COMM_WORLD_SIZE``,
   MPICH's and Intel MPI's ``PMI_RANK`` / ``PMI_SIZE``;
5. JAX, where ``jax.distributed`` was initialised in this process.

Sources that describe the same world (the same size) and name different
ranks contradict each other: that raises, naming both.  Sources with other
sizes are launchers nested around the one that decided (torchrun started
by one Slurm task a node), and are left alone.  A world size above one with
no rank raises.  Explicit ``rank=`` / ``world_size=`` arguments win over all
of them (a data-parallel rank that is not the global one, under tensor or
pipeline parallelism, is given that way).
"""
from __future__ import annotations

import os
import sys
from typing import List, NamedTuple, Optional, Tuple

from ._errors import InvalidArgument


# Every environment variable consulted (tests clear them).
VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "NODE_RANK", "GROUP_RANK", "LOCAL_WORLD_SIZE",
             "SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "OMPI_COMM_WORLD_RANK",
             "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE")


class Share(NamedTuple):
    rank: int
    world_size: int
    source: str       # who said so (shown in Loader.info() and repr)


def _env(name: str, env) -> Optional[int]:
    v = env.get(name)
    if v is None or v == "":
        return None
    try:
        return int(v)
    except ValueError:
        raise InvalidArgument(f"environment variable {name}={v!r} is not an integer") from None


def _torch_distributed() -> Optional[Tuple[int, int]]:
    # Never imported here: a process that uses torch.distributed has it.
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return None
    try:
        if not (dist.is_available() and dist.is_initialized()):
            return None
        return dist.get_rank(), dist.get_world_size()
    except (RuntimeError, ValueError, AttributeError):
        return None


def _jax() -> Optional[Tuple[int, int]]:
    if "jax" not in sys.modules:
        return None
    try:  # initialised by jax.distributed.initialize() in this process
        from jax._src import distributed  # type: ignore
        st = distributed.global_state
        if getattr(st, "client", None) is None or st.num_processes is None:
            return None
        return int(st.process_id), int(st.num_processes)
    except Exception:  # noqa: BLE001  (an internal of JAX's that moved)
        return None


def _launcher_env(env) -> List[Tuple[str, Optional[int], int]]:
    """(source, rank or None, world size) of each launcher's variables."""
    out = []
    world = _env("WORLD_SIZE", env)
    rank = _env("RANK", env)
    if world is not None:
        if rank is not None:
            out.append(("RANK/WORLD_SIZE", rank, world))
        else:
            local = _env("LOCAL_RANK", env)
            node = _env("NODE_RANK", env)
            if node is None:
                node = _env("GROUP_RANK", env)
            per_node = _env("LOCAL_WORLD_SIZE", env)
            if local is not None and not node:
                out.append(("LOCAL_RANK/WORLD_SIZE (node 0)", local, world))
            elif local is not None and per_node is not None:
                out.append(("NODE_RANK/LOCAL_RANK/LOCAL_WORLD_SIZE", node * per_node + local,
                            world))
            elif local is not None:
                out.append((f"LOCAL_RANK={local} on NODE_RANK={node}, processes per node "
                            f"unknown", None, world))
            else:
                out.append(("WORLD_SIZE without RANK or LOCAL_RANK", None, world))
    elif rank is not None and rank > 0:
        out.append((f"RANK={rank} without WORLD_SIZE", rank, None))
    steps = _env("SLURM_STEP_NUM_TASKS", env)
    if steps is not None:
        out.append(("Slurm (SLURM_PROCID/SLURM_STEP_NUM_TASKS)", _env("SLURM_PROCID", env), steps))
    for r, w, name in (("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "Open MPI"),
                       ("PMI_RANK", "PMI_SIZE", "MPI")):
        wv = _env(w, env)
        if wv is not None:
            out.append((f"{name} ({r}/{w})", _env(r, env), wv))
    return out


def resolve(rank: Optional[int] = None, world_size: Optional[int] = None,
            env=None) -> Share:
    """This process's (rank, world size, source); see the module's text.

    Raises:
        InvalidArgument: A world size above one with no rank, two sources
            of one world that name different ranks, or a rank outside the
            world.
    """
    env = os.environ if env is None else env
    seen: List[Tuple[str, Optional[int], Optional[int]]] = []
    td = _torch_distributed()
    if td is not None:
        seen.append(("torch.distributed", td[0], td[1]))
    seen += _launcher_env(env)
    jx = _jax()
    if jx is not None:
        seen.append(("jax.distributed", jx[0], jx[1]))

    if rank is not None and world_size is not None:
        return Share(rank, world_size, "arguments")
    known = [s for s in seen if s[2] is not None]
    if world_size is not None:
        # A world size given, the rank found among the sources of that size.
        same = [s for s in known if s[2] == world_size and s[1] is not None]
        if world_size == 1:
            return Share(0, 1, "argument world_size=1")
        if not same:
            raise InvalidArgument(
                f"world_size={world_size} was given but no rank: pass rank=, or launch with "
                f"torchrun / an initialised torch.distributed group"
                + (f" (seen: {_describe(seen)})" if seen else ""))
        return Share(same[0][1], world_size, f"argument world_size, rank from {same[0][0]}")
    if not known:
        for name, r, _ in seen:  # RANK=3 with no WORLD_SIZE
            raise InvalidArgument(f"{name}: the world size is not known; set WORLD_SIZE or "
                                  f"pass world_size=")
        if rank is not None and rank > 0:
            raise InvalidArgument(f"rank={rank} was given but no world size: pass world_size=")
        return Share(0 if rank is None else rank, 1, "default (one process)")
    name, r, w = known[0]
    if rank is not None:
        return Share(rank, w, f"argument rank, world size from {name}")
    if r is None:
        # The first source that knows the world size has no rank: another
        # of the same world may name it.
        named = [s for s in known[1:] if s[1] is not None and s[2] == w]
        if w == 1:
            return Share(0, 1, name)
        if not named:
            raise InvalidArgument(
                f"the world size is {w} ({name}) but this process's rank is not known: set "
                f"RANK (torchrun does), initialise torch.distributed before the first batch, "
                f"or pass rank= and world_size=; stoker does not guess rank 0, which would "
                f"give every process the same share")
        name, r, w = named[0]
        known = [named[0]] + [s for s in known if s is not named[0]]
    for other, r2, w2 in known[1:]:
        if w2 == w and r2 is not None and r2 != r:
            raise InvalidArgument(
                f"the rank is ambiguous: {name} says rank {r} of {w}, {other} says rank {r2} "
                f"of {w2}; pass rank= and world_size= to say which")
    return Share(r, w, name)


def _describe(seen) -> str:
    return "; ".join(f"{n}: rank {r} of {w}" for n, r, w in seen)
