"""Fixtures of the ui/ tests: the app through AppTest, and the ui package's caches."""
import pytest

from harness.apptest import CAT, DEFAULT, no_pages_dir_mode


@pytest.fixture(autouse=True)
def _through_app_py():
    """Every AppTest run goes through app.py (st.navigation), never Streamlit's legacy pages-directory runner."""
    with no_pages_dir_mode():
        yield


@pytest.fixture(scope="module")
def cat_trace():
    """(model, prepared input, trace) of the default model on CAT: what a page of it should show."""
    from service import catalog
    from transformer_core.text.inputs import trace_text

    model, _ = catalog.load(DEFAULT)
    prep, trace = trace_text(model, CAT)
    return model, prep, trace
