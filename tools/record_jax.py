"""Record a multi-device JAX training run the way docs/jax.md describes: a profile of a few
steps, their compiled HLO and unprofiled step times, laid out as `chakra convert` reads it.

    python -m tools.record_jax --model dp_tp --devices 4 --out datasets/jax-cpu/dp_tp

On a machine without accelerators N host devices stand in (XLA_FLAGS
--xla_force_host_platform_device_count=N); with `--platform gpu` (or tpu) the first N devices
of that kind are used. The run folder gets:
  trace/plugins/profile/<time>/<host>.xplane.pb, .trace.json.gz, perfetto_trace.json.gz
  hlo/module_<n>.jit_step.*.txt   the step's module before and after optimisation (the dump's
                                 other modules, object files and LLVM IR are removed)
  step.hlo.txt                    the compiled, scheduled module (compiled.as_text())
                                 (in every HLO text, source files are cut to their base names)
  timing.json                     {"steps_ns": [...], "devices", "model", "jax", "platform",
                                   "recorded_steps"}

Models (batch per device 64 unless said): mlp_dp (4 dense layers 512-1024-1024-1024-16, data
parallel), tp_mlp (GELU MLP 512-2048-512, w_in column- and w_out row-sharded, batch 256), dp_tp
(the GELU MLP on a 2-D mesh: batch over `dp`, weights over `tp`) and ring (each device's block
passed around a ring of collective-permutes, a matmul per hop, as in ring attention).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import time
from pathlib import Path

MODELS = ("mlp_dp", "tp_mlp", "dp_tp", "ring")


def _flags(devices: int, dump: Path, platform: str) -> str:
    flags = [f"--xla_dump_to={dump}", "--xla_dump_hlo_as_text", "--xla_dump_hlo_module_re=.*jit_step.*"]
    if platform == "cpu":
        flags.append(f"--xla_force_host_platform_device_count={devices}")
    return " ".join([os.environ.get("XLA_FLAGS", ""), *flags]).strip()


def _model(name: str, jax, devices: list):
    """(mesh, params, batch, loss) of a model, placed on the mesh."""
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    n = len(devices)
    key = jax.random.PRNGKey(0)
    if name == "mlp_dp":
        mesh = Mesh(devices, ("dp",))
        sizes = [512, 1024, 1024, 1024, 16]
        params = {f"w{i}": (jax.random.normal(key, (a, b)) * 0.02, P()) for i, (a, b) in enumerate(zip(sizes, sizes[1:]))}
        batch = {"x": (jnp.ones((64 * n, 512)), P("dp")), "y": (jnp.ones((64 * n, 16)), P("dp"))}

        def loss(p, b):
            h = b["x"]
            for i in range(4):
                h = h @ p[f"w{i}"]
                h = jax.nn.relu(h) if i < 3 else h
            return jnp.mean((h - b["y"]) ** 2)
    elif name == "ring":
        import numpy as np
        mesh = Mesh(np.array(devices), ("r",))
        params = {"w": (jax.random.normal(key, (256, 256)) * 0.02, P())}
        batch = {"x": (jnp.ones((64 * n, 256)), P("r"))}
        ring = [(i, (i + 1) % n) for i in range(n)]

        def hops(w, x):
            acc = x @ w
            for _ in range(n - 1):
                x = jax.lax.ppermute(x, "r", ring)
                acc = acc + jnp.tanh(x @ w)
            return acc

        def loss(p, b):
            out = jax.shard_map(hops, mesh=mesh, in_specs=(P(), P("r")), out_specs=P("r"))(p["w"], b["x"])
            return jnp.mean(out ** 2)
    else:
        import numpy as np
        axes = ("dp", "tp") if name == "dp_tp" else ("tp",)
        shape = (2, n // 2) if name == "dp_tp" else (n,)
        mesh = Mesh(np.array(devices).reshape(shape), axes)
        rows = 64 * n if name == "dp_tp" else 256
        data = P("dp") if name == "dp_tp" else P()
        params = {"w_in": (jax.random.normal(key, (512, 2048)) * 0.02, P(None, "tp")),
                  "w_out": (jax.random.normal(key, (2048, 512)) * 0.02, P("tp", None))}
        batch = {"x": (jnp.ones((rows, 512)), data), "y": (jnp.ones((rows, 512)), data)}

        def loss(p, b):
            return jnp.mean((jax.nn.gelu(b["x"] @ p["w_in"]) @ p["w_out"] - b["y"]) ** 2)

    def place(tree):
        return {k: jax.device_put(v, NamedSharding(mesh, spec)) for k, (v, spec) in tree.items()}

    return mesh, place(params), place(batch), loss


def record(model: str, devices: int, out: Path, steps: int = 2, timed_steps: int = 20, platform: str = "cpu") -> dict:
    """Record one run into out (see the module docstring); returns timing.json's content."""
    out.mkdir(parents=True, exist_ok=True)
    os.environ["XLA_FLAGS"] = _flags(devices, out / "hlo", platform)
    os.environ.setdefault("JAX_PLATFORMS", platform)
    import jax

    available = jax.devices()
    if len(available) < devices:
        raise SystemExit(f"record_jax: {len(available)} {platform} device(s), {devices} asked for")
    mesh, params, batch, loss = _model(model, jax, available[:devices])

    @jax.jit
    def step(p, b):
        value, grads = jax.value_and_grad(loss)(p, b)
        return jax.tree.map(lambda w, g: w - 0.01 * g, p, grads), value

    for _ in range(3):  # warm-up: compiled, caches filled
        params, value = step(params, batch)
        value.block_until_ready()
    jax.profiler.start_trace(str(out / "trace"), create_perfetto_trace=True)
    for i in range(steps):
        with jax.profiler.StepTraceAnnotation("train", step_num=i):
            params, value = step(params, batch)
            value.block_until_ready()
    jax.profiler.stop_trace()
    timed = []
    for _ in range(timed_steps):
        begin = time.perf_counter_ns()
        params, value = step(params, batch)
        value.block_until_ready()
        timed.append(time.perf_counter_ns() - begin)
    (out / "step.hlo.txt").write_text(step.lower(params, batch).compile().as_text())
    _keep_step_dump(out / "hlo")
    for text in [out / "step.hlo.txt", *(out / "hlo").glob("*.txt")]:
        text.write_text(relative_sources(text.read_text()))
    timing = {"steps_ns": timed, "devices": devices, "model": model, "jax": jax.__version__, "platform": platform,
              "recorded_steps": steps}
    (out / "timing.json").write_text(json.dumps(timing, indent=1) + "\n")
    return timing


def relative_sources(hlo: str) -> str:
    """The HLO text with its FileNames entries cut to base names: where the recording script
    lay on the recording machine is nobody's business (and would make a shipped run name it)."""
    return re.sub(r'^(\d+ )"[^"\n]*/([^"/\n]+)"$', r'\1"\2"', hlo, flags=re.M)


def _keep_step_dump(dump: Path) -> None:
    """Only the step module's text before and after optimisation (and its buffer assignment)."""
    for path in sorted(dump.iterdir()) if dump.is_dir() else []:
        keep = ".jit_step." in path.name and path.name.endswith(
            ("before_optimizations.txt", "after_optimizations.txt", "after_optimizations-buffer-assignment.txt"))
        if path.is_dir():
            shutil.rmtree(path)
        elif not keep:
            path.unlink()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=MODELS, required=True)
    parser.add_argument("--devices", type=int, default=4, help="devices of the mesh (default 4)")
    parser.add_argument("--out", type=Path, required=True, help="the run folder to write")
    parser.add_argument("--steps", type=int, default=2, help="profiled steps (default 2)")
    parser.add_argument("--timed-steps", type=int, default=20, help="unprofiled timed steps (default 20)")
    parser.add_argument("--platform", choices=("cpu", "gpu", "tpu"), default="cpu")
    args = parser.parse_args(argv)
    if args.model == "dp_tp" and args.devices % 2:
        parser.error("dp_tp needs an even device count (a 2 x N/2 mesh)")
    timing = record(args.model, args.devices, args.out, args.steps, args.timed_steps, args.platform)
    median = sorted(timing["steps_ns"])[len(timing["steps_ns"]) // 2] / 1e6
    print(f"recorded {args.model} on {args.devices} {args.platform} device(s) into {args.out}: median unprofiled"
          f" step {median:.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
