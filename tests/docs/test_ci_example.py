"""Issue 37.3: docs/ci-example.md says how another repository installs speccheck (from a VCS
address, a path or a wheel), then the pytest fixture and the command."""

from pathlib import Path

PAGE = Path(__file__).resolve().parents[2] / "docs" / "ci-example.md"


def test_ci_example_says_how_to_install_speccheck_elsewhere():
    text = PAGE.read_text()
    install = text.split("## Installing speccheck in your repository", 1)[1].split("\n## ", 1)[0]
    assert "git+https://" in install and "pip install /path/to/speccheck" in install
    assert ".whl" in install and "pip wheel" in install  # a wheel, and how to build one
    assert "speccheck --version" in install and "[project.optional-dependencies]" in install
    assert "speccheck_battery" in text and "speccheck battery --verifier" in text
