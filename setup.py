"""Builds the C extensions (ET codec, JSON scanner, PyTorch ET node and Kineto event digests, thread span walks, DAG critical path); all other metadata lives in pyproject.toml."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "chakra_core._native._etcodec",
            sources=["chakra_core/_native/etcodec.c"],
            extra_compile_args=["-O3", "-std=gnu11", "-Wall", "-pthread"],
            extra_link_args=["-pthread"],
        ),
        Extension(
            "chakra_core._native._jsonscan",
            sources=["chakra_core/_native/jsonscan.c"],
            depends=["chakra_core/_native/jsonscan.h"],
            extra_compile_args=["-O3", "-std=gnu11", "-Wall"],
        ),
        Extension(
            "chakra_core._native._graphpath",
            sources=["chakra_core/_native/graphpath.c"],
            extra_compile_args=["-O3", "-std=gnu11", "-Wall"],
        ),
        Extension(
            "chakra_core._native._ptdigest",
            sources=["chakra_core/_native/ptdigest.c"],
            depends=["chakra_core/_native/jsonscan.h"],
            extra_compile_args=["-O3", "-std=gnu11", "-Wall"],
        ),
        Extension(
            "chakra_core._native._kinetodigest",
            sources=["chakra_core/_native/kinetodigest.c", "chakra_core/_native/kinetoevents.c"],
            depends=["chakra_core/_native/jsonscan.h", "chakra_core/_native/kinetoevents.h"],
            extra_compile_args=["-O3", "-std=gnu11", "-Wall"],
        ),
        Extension(
            "chakra_core._native._threadspans",
            sources=["chakra_core/_native/threadspans.c"],
            extra_compile_args=["-O3", "-std=gnu11", "-Wall"],
        ),
    ]
)
