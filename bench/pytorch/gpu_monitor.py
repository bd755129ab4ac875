"""The GPU's SM clock, power draw and clock-limit reasons, sampled by nvidia-smi in the background
while a PyTorch comparison runs (bench/pytorch/torch_overhead.py): the state each series meets.

    monitor = GpuMonitor("GPU-<uuid>")   # starts sampling; nothing at all without nvidia-smi
    t0 = time.monotonic(); ...; t1 = time.monotonic()
    monitor.window(t0, t1)               # {"sm_mhz_median", "power_w_max", "reason_share", ...} or None
    monitor.stop()
"""

import statistics
import subprocess
import time


class GpuMonitor:
    """The GPU's SM clock, power draw and clock-limit reasons, sampled by nvidia-smi every @p ms
    milliseconds in the background while the series run (the state each series meets: a GPU that
    runs back to back reaches its power limit and lowers its clock). Nothing when nvidia-smi is
    absent."""

    FIELDS = "clocks.sm,power.draw,power.limit,clocks_throttle_reasons.active,temperature.gpu"
    REASONS = {0x1: "idle", 0x4: "software power cap", 0x8: "hardware slowdown", 0x20: "software thermal",
               0x40: "hardware thermal", 0x80: "power brake"}

    def __init__(self, uuid, ms=100):
        import shutil
        import threading

        self.samples = []
        self.proc = None
        exe = shutil.which("nvidia-smi")
        if exe is None:
            return
        cmd = [exe, "--query-gpu=" + self.FIELDS, "--format=csv,noheader,nounits", "-lms", str(ms)]
        # The device by its UUID (CUDA's numbering can differ from nvidia-smi's); all GPUs' lines
        # mixed would be wrong, so without a UUID only a machine with one GPU is sampled.
        for extra in (["-i", uuid] if uuid else None), ([] if torch_device_count() == 1 else None):
            if extra is None:
                continue
            try:
                self.proc = subprocess.Popen(cmd + extra, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                             text=True)
            except OSError:
                return
            time.sleep(0.3)
            if self.proc.poll() is None:
                break
            self.proc = None
        if self.proc is None:
            return

        def read():
            for line in self.proc.stdout:
                parts = [x.strip() for x in line.split(",")]
                try:
                    self.samples.append((time.monotonic(), float(parts[0]), float(parts[1]), float(parts[2]),
                                         int(parts[3], 16), float(parts[4])))
                except (ValueError, IndexError):
                    continue

        threading.Thread(target=read, daemon=True).start()

    def window(self, t0, t1):
        """Summary of the samples between monotonic times @p t0 and @p t1 (None without any)."""
        return self.windows([(t0, t1)])

    def windows(self, spans):
        """Summary of the samples inside any of the (t0, t1) @p spans (None without any)."""
        xs = [x for x in self.samples if any(a <= x[0] <= b for a, b in spans)]
        if not xs:
            return None
        reasons = {}
        for x in xs:
            for bit, name in self.REASONS.items():
                if x[4] & bit:
                    reasons[name] = reasons.get(name, 0) + 1
        return {"samples": len(xs), "sm_mhz_median": statistics.median(x[1] for x in xs),
                "sm_mhz_min": min(x[1] for x in xs), "power_w_median": statistics.median(x[2] for x in xs),
                "power_w_max": max(x[2] for x in xs), "power_limit_w": xs[-1][3],
                "temperature_c_max": max(x[5] for x in xs),
                "reason_share": {n: c / len(xs) for n, c in sorted(reasons.items())}}

    def stop(self):
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def torch_device_count():
    import torch

    return torch.cuda.device_count()
