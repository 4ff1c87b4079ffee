"""Whether a folder is a JAX run, by its layout (the registry's folder detector, convert/sources.py).

Kept apart from run.py: every conversion of a folder asks it, and run.py brings in the whole JAX
converter (HLO parsing, the emitter), which a PyTorch conversion has no use for."""

from __future__ import annotations

import fsspec

from chakra_core.convert import sources


def files(src: str) -> tuple[object, str, list[str]]:
    """(file system, root, the paths of every file below the root, relative to it, sorted)."""
    fs, root = fsspec.core.url_to_fs(src)
    root = root.rstrip("/")
    return fs, root, sorted(p[len(root) + 1:] for p in fs.find(root))


def is_jax_run(src: str) -> bool:
    """Whether src is a folder holding a JAX profile (the registry's JAX_PROFILE, at most one folder down)."""
    fs, path = fsspec.core.url_to_fs(src)
    return fs.isdir(path) and any(sources.JAX_PROFILE.match(name) for name in files(src)[2])
