"""Pictures of traces and tables: visualize (the dependency graph), timeline (Perfetto), plot
(figures from the pipeline's tables), report (a day of the warehouse as one HTML page). Each command and its parser live in chakra_core.viz."""

from __future__ import annotations

# The one-line helps again, as the viz parsers give them: `chakra --help` lists these commands
# without importing chakra_core.viz, which imports numpy, pyarrow and fsspec at module level
# (tests/test_cli.py checks that the texts agree).
COMMANDS = {
    "visualize": "draw a trace's dependency graph (.png, .svg, .pdf, .dot, .graphml)",
    "timeline": "write a Perfetto / chrome://tracing timeline (Chrome Trace Event JSON)",
    "plot": "draw performance figures (PNG or SVG) from the pipeline's Parquet tables",
    "report": "write the fleet report's pages: an index of days, a page per day and per job",
}


def add_parsers(sub) -> None:
    from chakra_core.viz.graph import add_visualize_parser
    from chakra_core.viz.plots import add_plot_parser
    from chakra_core.viz.report import add_report_parser
    from chakra_core.viz.timeline_cli import add_timeline_parser

    add_visualize_parser(sub)
    add_timeline_parser(sub)
    add_plot_parser(sub)
    add_report_parser(sub)
