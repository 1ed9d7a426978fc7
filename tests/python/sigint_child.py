"""Run by test_py_interrupt.py: one epoch read again and again, each time
interrupted by a SIGINT at a random offset and resumed from the state saved
in the handler, as training scripts do; prints what each run delivered.

The SIGINT handler raises KeyboardInterrupt only while the loop is inside
the loader (between asking for a batch and holding it); one that lands
while the loop body records a batch is raised after the record, so that
what is checked is the loader's hand-over, not the recording."""
import json
import os
import random
import signal
import sys
import threading

import stoker

path, trials, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(seed)
flag = {"in": False, "deferred": False}


def handler(sig, frame):
    if flag["in"]:
        raise KeyboardInterrupt
    flag["deferred"] = True


signal.signal(signal.SIGINT, handler)
opts = dict(shuffle="random", seed=5, threads=1, prefetch=2, warm_up=False)

with stoker.Loader(path, 2, **opts) as ld:
    whole = [i for b in ld for i in b["id"].tolist()]
runs = []
for t in range(trials):
    seen, state, interrupts = [], None, 0
    delay = rng.uniform(0.0, float(sys.argv[4]))
    timer = threading.Timer(delay, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    while True:
        ld = stoker.Loader(path, 2, **opts)
        if state is not None:
            ld.load_state_dict(state)
        try:
            flag["in"] = True
            for b in ld:
                flag["in"] = False
                seen.extend(b["id"].tolist())
                if flag["deferred"]:
                    flag["deferred"] = False
                    raise KeyboardInterrupt
                flag["in"] = True
            flag["in"] = False
            ld.close()
            break
        except KeyboardInterrupt:
            flag["in"] = False
            interrupts += 1
            state = ld.state_dict()
            ld.close()
    timer.cancel()
    timer.join()
    flag["deferred"] = False
    runs.append({"seen": seen, "interrupts": interrupts})
print(json.dumps({"whole": whole, "runs": runs}))
