"""A day as the warehouse and every command line write it: YYYY-MM-DD (`--date`, `--against`)."""

from __future__ import annotations

import argparse
import datetime as dt


def iso_day(text: str) -> str:
    """An argparse type: a calendar day as YYYY-MM-DD; anything else (12/02/2026, an empty
    string, a path; 20261202, which Python reads too) is refused by argparse in one line."""
    try:
        day = dt.date.fromisoformat(text) if len(text) == 10 else None
    except ValueError:
        day = None
    if day is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a day: give YYYY-MM-DD, such as 2026-12-02")
    return text
