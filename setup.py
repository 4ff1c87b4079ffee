"""Builds the C extensions (ET codec, JSON scanner); all other metadata lives in pyproject.toml."""

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
            extra_compile_args=["-O3", "-std=gnu11", "-Wall"],
        ),
    ]
)
