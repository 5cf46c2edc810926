"""Helpers shared by the command-line tests: a tiny battery suite written to a file, and an
in-process ``speccheck`` call that must never print a traceback."""

from __future__ import annotations

from pathlib import Path

from speccheck import cli


def tiny_suite_text(name: str, *, n: int = 2048, extra: str = "") -> str:
    """A suite of one scalar cell (delta = 1, K = 1, 2; n draws) and a 64-draw contract layer, plus
    ``extra`` TOML sections: seconds per battery run."""
    return (f'name = "{name}"\nseed = 5\nfamily_alpha = 1e-3\n[scalar]\ndeltas = [1.0]\nK = [1, 2]\n'
            f"n = {n}\n[contract]\nn = 64\n{extra}")


def write_suite(folder: Path, text: str) -> str:
    """Write ``text`` as ``folder/tiny.toml``; its path as a string."""
    path = Path(folder) / "tiny.toml"
    path.write_text(text)
    return str(path)


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:  # noqa: ANN001 - pytest fixture
    """``speccheck.cli.main(argv)`` in this process: (exit code, stdout, stderr), never a traceback."""
    code = cli.main(argv)
    out, err = capsys.readouterr()
    assert "Traceback" not in err and "Traceback" not in out
    return code, out, err
