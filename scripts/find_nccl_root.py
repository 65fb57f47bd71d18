"""Print the folder of a pip wheel's NCCL (nvidia-nccl-cu*: include/nccl.h, lib/libnccl.so.2), or nothing.

Used by scripts/gpu_check.sh and scripts/gpu_full_check.sh on GPU machines whose NCCL came with PyTorch.
"""
import glob
import importlib.util
import os

spec = importlib.util.find_spec("nvidia.nccl")
if spec:
    print(list(spec.submodule_search_locations)[0])
else:  # other wheel layouts: the folder above an include/nccl.h
    top = importlib.util.find_spec("nvidia")
    for root in (top.submodule_search_locations if top else []):
        hits = glob.glob(os.path.join(root, "**", "include", "nccl.h"), recursive=True)
        if hits:
            print(os.path.dirname(os.path.dirname(hits[0])))
            break
