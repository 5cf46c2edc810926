"""docs/api/*.md are generated from the code (docs/api/_generate.py): they must be up to date."""

import importlib.util
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs" / "api"


def _generator():
    spec = importlib.util.spec_from_file_location("_generate_api_docs", DOCS / "_generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_api_pages_are_up_to_date_with_the_code():
    gen = _generator()
    stale = [stem for stem in gen.PAGES if (DOCS / f"{stem}.md").read_text() != gen.render(stem)]
    assert not stale, f"stale API pages {stale}: run python docs/api/_generate.py"


def test_every_public_module_has_a_page_listing_its_names():
    gen = _generator()
    assert set(gen.PAGES) == {"speccheck", "api", "sampler", "theory", "verifiers", "validation", "targets"}
    sampler = (DOCS / "sampler.md").read_text()
    for name in ("SpeculativeSampler", "sample", "PlainResult", "run_cells"):
        assert f"`{name}(" in sampler
    top = (DOCS / "speccheck.md").read_text()
    assert "### `sample(target: object, schedule: Schedule, n: int, *, generator:" in top
