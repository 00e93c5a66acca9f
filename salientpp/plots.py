"""Figures: matplotlib with a file-only backend, and the checks of a plot's output path, made
before the work whose results it draws."""
from __future__ import annotations

from pathlib import Path

from .errors import InputError
from .io import check_output_dir


def require_pyplot():
    """``matplotlib.pyplot`` with a file-only backend; :class:`InputError` when matplotlib is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise InputError("matplotlib is not installed, so the plot cannot be drawn; "
                         "`pip install matplotlib` or leave out --plot") from None
    return plt


def plot_formats() -> dict[str, str]:
    """The file suffixes matplotlib can write (``{"png": "Portable Network Graphics", ...}``)."""
    from matplotlib.backend_bases import FigureCanvasBase
    return FigureCanvasBase.get_supported_filetypes()


def check_plot_path(path: str, option: str = "--plot") -> Path:
    """Raise :class:`InputError` unless matplotlib is importable and can write the format that
    ``path``'s suffix names, and ``path`` is a new file in a writable directory; return it."""
    require_pyplot()
    suffix = Path(path).suffix.lower().lstrip(".")
    formats = plot_formats()
    if suffix not in formats:
        known = ", ".join("." + f for f in sorted(formats))
        got = f"the suffix .{suffix}" if suffix else "no suffix"
        raise InputError(f"{option} {path} has {got}, which is not an image format matplotlib writes; "
                         f"end it with one of {known}")
    return check_output_dir(path, "output file")
