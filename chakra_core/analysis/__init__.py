"""Questions asked of traces, each answered as a table (one facade over them for a job:
``JobAnalysis``, in ``facade``): per-trace statistics (``stats``),
file summaries (``info``), fleet surveys (``survey``), validation (``validate``), the
dependency-graph algorithms they share (``graph``), representative selection (``select``,
``fleet``) and SQL over the warehouse (``warehouse``)."""


def __getattr__(name: str):
    # lazy, so that `chakra info` importing analysis.info does not pay for the statistics
    if name == "JobAnalysis":
        from chakra_core.analysis.facade import JobAnalysis

        return JobAnalysis
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
