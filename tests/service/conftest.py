"""Fixtures of the service/ tests (server_env, user_dir and one_torch_thread, shared with other layers, are in
../conftest.py)."""
import pytest

from service import jobs


@pytest.fixture
def fresh_jobs(user_dir, monkeypatch):
    """A fresh user folder and job table; every job started here is stopped and joined. Modules of job tests use it
    for every test: pytestmark = pytest.mark.usefixtures("fresh_jobs")."""
    monkeypatch.setattr(jobs, "_JOBS", {})
    monkeypatch.setattr(jobs, "_SEEN", {})
    yield
    for job in list(jobs._JOBS.values()):
        job.stop.set()
        job.wait(30)
