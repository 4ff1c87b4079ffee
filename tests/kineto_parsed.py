"""A stand-in for the C Kineto digest that declines every batch, so that
`chakra_core.convert.pytorch.kineto` reads each one by parsing it: the reference the digested
reading is compared with (tests/test_kinetodigest.py, tests/test_big_convert.py). Use it as
`monkeypatch.setattr(kineto_module, "_kinetodigest", NoKinetoDigest)`."""

from __future__ import annotations


class NoKinetoDigest:
    @staticmethod
    def digest(buf, start, end, names):
        return None

    @staticmethod
    def digest_elements(buf, pos, end, names, max_items, max_depth):
        return 0, -1, pos, False, None  # no element walked: each batch is scanned, then parsed
