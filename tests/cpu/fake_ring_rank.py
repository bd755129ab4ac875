#!/usr/bin/env python3
"""A stand-in for rung 12's executable in the launcher's CPU test (no GPU, no NCCL).

It takes the flags the launcher gives a rank (--gpus, --rank, --local-rank, --id-file,
--timeout, --preflight, --shared-gpu) and acts as told by the environment:
  FAKE_GPUS          GPUs this "machine" has (preflight: more asked -> exit 2; 0 -> exit 77)
  FAKE_OUT           a directory: each rank writes rank<r>.txt with what it was given
  FAKE_FAIL_RANK     that rank exits with FAKE_FAIL_CODE (default 1) after FAKE_FAIL_AFTER s
  FAKE_HANG          1: every rank that does not fail waits forever (as on a dead peer)
"""
import json
import os
import sys
import time


def main(argv):
    flags, i = {}, 0
    while i < len(argv):
        a = argv[i]
        if a in ("--preflight", "--shared-gpu"):
            flags[a[2:]] = True
        elif a.startswith("--") and i + 1 < len(argv):
            flags[a[2:]] = argv[i + 1]
            i += 1
        i += 1
    gpus = int(os.environ.get("FAKE_GPUS", "8"))
    if flags.get("preflight"):
        if gpus == 0:
            print("fake: no usable CUDA device (exit 77 = skipped)", file=sys.stderr)
            return 77
        need = int(flags.get("local-rank", "0")) + 1
        if need > gpus:
            print("fake: the ring asks for %d GPUs on this machine but %d are visible" % (need, gpus),
                  file=sys.stderr)
            return 2
        return 0
    rank = int(flags["rank"])
    out = os.environ.get("FAKE_OUT")
    if out:
        with open(os.path.join(out, "rank%d.txt" % rank), "w") as f:
            json.dump({"rank": rank, "local_rank": int(flags["local-rank"]), "gpus": int(flags["gpus"]),
                       "id_file": flags["id-file"], "timeout": flags["timeout"], "pid": os.getpid(),
                       "nvls": os.environ.get("NCCL_NVLS_ENABLE"), "argv": argv,
                       "shared_gpu": flags.get("shared-gpu", False),
                       "wrapped": os.environ.get("FAKE_WRAPPED"),
                       "nccl_env": {k: v for k, v in os.environ.items()
                                    if k in ("NCCL_HOSTID", "NCCL_NET", "NCCL_SOCKET_IFNAME")}}, f)
    print("fake rank %d here" % rank)
    sys.stdout.flush()
    if os.environ.get("FAKE_FAIL_RANK") == str(rank):
        time.sleep(float(os.environ.get("FAKE_FAIL_AFTER", "0.3")))
        print("fake rank %d: leaving early" % rank, file=sys.stderr)
        return int(os.environ.get("FAKE_FAIL_CODE", "1"))
    if os.environ.get("FAKE_HANG") == "1":
        while True:
            time.sleep(1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
