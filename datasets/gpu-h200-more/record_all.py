#!/usr/bin/env python3
"""Record held-out GPU runs for issue 38 (self-contained: torch, torchvision, jax; the recorder is
a copy of chakra_core/convert/collect.py, the probe of tools/profcost.py).

    python3 .gpurec/record_all.py [--device cuda|cpu] [--out DIR] [--budget-s 480] [--only NAME...]

Per PyTorch run <name>/: rank0.et.json.gz, rank0.kineto.json.gz (two profiled steps after one
warm-up step of the profiler), rank0.timing.json (20 steps with the profiler off, each ended by a
device synchronisation), job.json, profiler_cost.json (the probe, run once per machine).
Runs go in order of importance and each runs in its own process; a run that would not fit in the
budget is skipped. Archives are rewritten after each run, so a cut-off call still brings back
what finished.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

WARMUP_STEPS = 3  # before the recorder: first-call costs, compilation, cudagraph capture
TIMED = 20

# name -> (group, builder kwargs, estimated seconds on an H200, for the budget)
RUNS = {
    "resnet50-b64": ("resnet50", {"arch": "resnet50", "batch": 64}, 40),
    "resnet18-b4": ("resnet18", {"arch": "resnet18", "batch": 4}, 25),
    "gpt4-d128": ("gpt", {"layers": 4, "d": 128, "seq": 128, "batch": 8}, 25),
    "gpt6-d512-item": ("gpt", {"layers": 6, "d": 512, "seq": 256, "batch": 8, "item": True}, 30),
    "gpt12-d768-compiled": ("gptc", {"layers": 12, "d": 768, "seq": 512, "batch": 8, "compile": "default"}, 110),
    "gpt6-d512-cudagraphs": ("gptc", {"layers": 6, "d": 512, "seq": 256, "batch": 8,
                                     "compile": "reduce-overhead"}, 90),
    "resnet18-b64": ("resnet18", {"arch": "resnet18", "batch": 64}, 25),
    "resnet50-b8": ("resnet50", {"arch": "resnet50", "batch": 8}, 35),
    "gpt6-d512": ("gpt2", {"layers": 6, "d": 512, "seq": 256, "batch": 8}, 30),
    "gpt12-d768": ("gpt2", {"layers": 12, "d": 768, "seq": 512, "batch": 8}, 30),
    "resnet50-b128": ("resnet50b", {"arch": "resnet50", "batch": 128}, 40),
}


def build_conv(device, arch, batch):
    import torch
    import torchvision
    from torch import nn

    torch.manual_seed(0)
    model = getattr(torchvision.models, arch)(num_classes=1000).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(batch, 3, 224, 224, device=device)
    y = torch.randint(0, 1000, (batch,), device=device)
    loss_fn = nn.CrossEntropyLoss()

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
    return step


def build_gpt(device, layers, d, seq, batch, item=False, compile=None, vocab=8192):
    import torch
    import torch.nn.functional as F
    from torch import nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
            self.heads = max(1, d // 64)

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
            q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
            return x + self.out(F.gelu(self.fc(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

        def forward(self, idx):
            x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
            for block in self.blocks:
                x = block(x)
            return self.head(self.ln(x))

    torch.manual_seed(0)
    model = GPT().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    forward = torch.compile(model, mode=compile) if compile else model
    tokens = torch.randint(0, vocab, (batch, seq + 1), device=device)
    cuda = device.type == "cuda"

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda):
            logits = forward(tokens[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, vocab).float(), tokens[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        if item:
            loss.item()  # logging the loss: the host waits for the device every step
    return step


def record_one(name: str, run_dir: Path, device_name: str) -> None:
    import torch
    from collect_rec import TraceRecorder

    torch.set_num_threads(4)
    device = torch.device(device_name)
    group, kwargs, _ = RUNS[name]
    step = (build_conv if group.startswith("resnet") else build_gpt)(device, **kwargs)

    def synced():
        step()
        if device.type == "cuda":
            torch.cuda.synchronize()  # the step ends when its kernels do
    for _ in range(WARMUP_STEPS):
        synced()
    run_dir.mkdir(parents=True, exist_ok=True)
    with TraceRecorder(run_dir, warmup=1, active=2, compress=True, rank=0) as rec:
        for _ in range(4):  # warm-up of the profiler, two recorded steps, one after the window
            synced()
            rec.step()
    times = []
    for _ in range(TIMED):
        start = time.perf_counter_ns()
        synced()
        times.append(time.perf_counter_ns() - start)
    (run_dir / "rank0.timing.json").write_text(json.dumps({"steps_ns": times}) + "\n")
    job = {"job_id": name, "model": name, "config": kwargs, "world_size": 1, "backend": "none",
           "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
           "torch": torch.__version__, "recorded_steps": 2, "warmup_steps_before_recording": WARMUP_STEPS,
           "each_step_ends_with": "torch.cuda.synchronize()" if device.type == "cuda" else "nothing",
           "median_unprofiled_step_ns": sorted(times)[len(times) // 2]}
    (run_dir / "job.json").write_text(json.dumps(job, indent=1) + "\n")


def archive(out: Path, runs_root: Path, group: str, names: list[str]) -> None:
    path = out / f"torch_{group}.tar.gz"
    tmp = path.with_suffix(".tmp")
    with tarfile.open(tmp, "w:gz") as tar:
        for name in names:
            if (runs_root / name / "rank0.timing.json").exists():
                tar.add(runs_root / name, arcname=name)
    tmp.replace(path)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/gpurec-out")))
    parser.add_argument("--budget-s", type=float, default=450)
    parser.add_argument("--only", nargs="*")
    parser.add_argument("--one")
    parser.add_argument("--no-jax", action="store_true")
    args = parser.parse_args()
    work = Path("/tmp/gpurec-runs")
    if args.one:
        record_one(args.one, work / args.one, args.device)
        return 0
    started = time.monotonic()
    args.out.mkdir(parents=True, exist_ok=True)
    if work.exists():
        shutil.rmtree(work)
    work.mkdir()
    log = open(args.out / "log.txt", "a")

    def say(text):
        line = f"[{time.monotonic() - started:6.1f}s] {text}"
        print(line, flush=True)
        log.write(line + "\n")
        log.flush()

    env = dict(os.environ, PYTHONUNBUFFERED="1")
    probe = work / "probe"
    for dev in ([args.device, "cpu"] if args.device != "cpu" else ["cpu"]):
        calls, repeats = ("200", "3") if dev != "cpu" or args.device == "cpu" else ("100", "2")
        try:
            r = subprocess.run([sys.executable, str(HERE / "profcost.py"), "--out", str(probe / dev), "--device", dev,
                                "--calls", os.environ.get("PROBE_CALLS", calls), "--repeats", repeats],
                               capture_output=True, text=True, env=env, timeout=90)
        except subprocess.TimeoutExpired:
            say(f"probe {dev}: timed out")
            continue
        say(f"probe {dev}: rc {r.returncode}\n{r.stdout[-3000:]}{r.stderr[-2000:]}")
    if not args.no_jax:
        jax_dir = work / "jax-gpu"
        r = subprocess.run([sys.executable, str(HERE / "jax_mlp.py"), "--out", str(jax_dir)],
                           capture_output=True, text=True, env=dict(env, XLA_PYTHON_CLIENT_PREALLOCATE="false"),
                           timeout=150)
        say(f"jax: rc {r.returncode}\n{r.stdout[-2000:]}{r.stderr[-3000:]}")
        if jax_dir.exists():
            with tarfile.open(args.out / "jax_gpu.tar.gz", "w:gz") as tar:
                tar.add(jax_dir, arcname="jax-gpu")
    names = args.only or list(RUNS)
    done: dict[str, list[str]] = {}
    for name in names:
        group, _, estimate = RUNS[name]
        left = args.budget_s - (time.monotonic() - started)
        if left < estimate:
            say(f"skip {name}: {left:.0f} s left, needs about {estimate}")
            continue
        t0 = time.monotonic()
        try:
            r = subprocess.run([sys.executable, __file__, "--one", name, "--device", args.device],
                               capture_output=True, text=True, env=env, timeout=max(10.0, left - 5))
            say(f"{name}: rc {r.returncode} in {time.monotonic() - t0:.1f} s\n{r.stdout[-1500:]}{r.stderr[-2500:]}")
        except subprocess.TimeoutExpired:
            say(f"{name}: timed out after {time.monotonic() - t0:.1f} s")
            continue
        run_dir = work / name
        if r.returncode == 0 and run_dir.exists():
            if probe.exists():
                shutil.copy(probe / args.device / "profiler_cost.json", run_dir / "profiler_cost.json")
            sizes = {p.name: p.stat().st_size for p in run_dir.iterdir()}
            say(f"  files: {sizes}; job: {(run_dir / 'job.json').read_text()}")
            done.setdefault(group, []).append(name)
            archive(args.out, work, group, done[group])
    with tarfile.open(args.out / "probe.tar.gz", "w:gz") as tar:
        tar.add(probe, arcname="probe")
    say("finished")
    return 0


if __name__ == "__main__":
    sys.exit(main())
