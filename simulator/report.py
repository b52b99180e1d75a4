"""The report a user holds: analysis's record of a run, with the conveniences that render it
(a text summary, plots, a Chrome trace, the display in Jupyter). It sits above analysis and
viz, so that the analysis never reaches up to the rendering."""

from __future__ import annotations

import html
from dataclasses import fields

from .analysis.report import Report


class SimulationReport(Report):
    """`r.summary()`, `r.plot_timeline()`, `r.plot_roofline()`, `r.write_chrome_trace(path)`;
    shown as its summary in Jupyter and IPython."""

    @classmethod
    def of(cls, record: Report) -> SimulationReport:
        """The user's report of an analysed run: the same record, with its renderings."""
        return cls(**{f.name: getattr(record, f.name) for f in fields(Report)})

    def _repr_pretty_(self, printer, cycle: bool) -> None:  # IPython / Jupyter
        printer.text(self.summary())

    def _repr_html_(self) -> str:
        return f"<pre>{html.escape(self.summary())}</pre>"

    def plot_timeline(self, path=None, cores=(0, 1), window_cycles=None):
        """Gantt chart of the chosen cores' pipes, stalls shaded by cause (a matplotlib Figure)."""
        from .viz.plots import plot_timeline

        return plot_timeline(self, path, cores=cores, window_cycles=window_cycles)

    def plot_roofline(self, path=None):
        from .viz.plots import plot_roofline

        return plot_roofline(self, path)

    def write_chrome_trace(self, path, only=None) -> None:
        """The Chrome trace (gzipped if `path` ends in .gz); `only`: a viz.chrome_trace
        TraceLimits, to keep some cores or kernels."""
        from .viz.chrome_trace import write_chrome_trace

        write_chrome_trace(self, path, only)

    def summary(self) -> str:
        from .viz.table import render_report

        return render_report(self)
