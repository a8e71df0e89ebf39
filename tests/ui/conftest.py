"""Fixtures of the ui/ tests: the app through AppTest, and the ui package's caches."""
import pytest

from harness.apptest import no_pages_dir_mode


@pytest.fixture(autouse=True)
def _through_app_py():
    """Every AppTest run goes through app.py (st.navigation), never Streamlit's legacy pages-directory runner."""
    with no_pages_dir_mode():
        yield
