"""Imports of the peer loaders that need help on this machine.

MosaicML Streaming's package __init__ imports its vision datasets, which
import torchvision. PyPI has torchvision only as a CUDA build, and that build
does not load against the CPU build of torch this project pins (its custom
operators fail to register). Streaming's MDS reader and writer use nothing of
torchvision, so where torchvision cannot be imported the benchmarks give
Streaming a stand-in module with the two names its vision code refers to.
The stand-in is installed only in the process that imports Streaming.
"""
import sys
import types


def streaming():
    try:
        import torchvision  # noqa: F401
    except Exception:
        # transformers (imported by Streaming) probes for torchvision with
        # find_spec when it is imported: let it find none before the stand-in.
        import transformers.feature_extraction_utils  # noqa: F401
        for name in [k for k in sys.modules if k == "torchvision" or k.startswith("torchvision.")]:
            del sys.modules[name]
        tv = types.ModuleType("torchvision")
        ds = types.ModuleType("torchvision.datasets")
        tr = types.ModuleType("torchvision.transforms")
        fn = types.ModuleType("torchvision.transforms.functional")

        class VisionDataset:  # never instantiated by the benchmarks
            pass

        def to_tensor(*a, **k):
            raise RuntimeError("torchvision stand-in: vision transforms are not available")

        ds.VisionDataset = VisionDataset
        ds.CIFAR10 = VisionDataset
        fn.to_tensor = to_tensor
        tv.datasets, tv.transforms, tr.functional = ds, tr, fn
        sys.modules.update({"torchvision": tv, "torchvision.datasets": ds,
                            "torchvision.transforms": tr, "torchvision.transforms.functional": fn})
    import streaming as s
    return s
