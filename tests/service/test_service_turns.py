"""service.turns: one server computes at most TRANSFORMER_EXPLORER_PAGE_RUNS pages at once, the others wait their
turn; a turn is given back however a run ends, and app.py takes one around the sidebar and the page."""
import threading
import time

import pytest

from service import turns


@pytest.fixture
def fresh_turns(monkeypatch, server_env):
    """The turns made anew from settings set for this test: fresh_turns(TRANSFORMER_EXPLORER_PAGE_RUNS="1")."""
    def make(**env):
        server_env(**env)
        monkeypatch.setattr(turns, "_turns", [])
    return make


def most_at_once(n_runs: int, hold_s: float = 0.05) -> int:
    """Start n_runs threads that each hold a turn for hold_s; the most inside at once."""
    inside, most, lock = [0], [0], threading.Lock()

    def run():
        with turns.page_turn():
            with lock:
                inside[0] += 1
                most[0] = max(most[0], inside[0])
            time.sleep(hold_s)
            with lock:
                inside[0] -= 1

    threads = [threading.Thread(target=run) for _ in range(n_runs)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=30)
    assert not any(th.is_alive() for th in threads)
    return most[0]


def test_at_most_the_setting_s_pages_are_computed_at_once(fresh_turns):
    fresh_turns()  # the default
    assert turns.settings().page_runs == 2 and most_at_once(6) == 2
    fresh_turns(TRANSFORMER_EXPLORER_PAGE_RUNS="1")
    assert most_at_once(4) == 1


def test_zero_means_no_limit_and_a_bad_value_falls_back_to_the_default(fresh_turns):
    fresh_turns(TRANSFORMER_EXPLORER_PAGE_RUNS="0")
    assert most_at_once(5, hold_s=0.3) == 5
    fresh_turns(TRANSFORMER_EXPLORER_PAGE_RUNS="-3")
    assert turns.settings().page_runs == 2


def test_a_run_that_ends_in_an_exception_gives_its_turn_back(fresh_turns):
    fresh_turns(TRANSFORMER_EXPLORER_PAGE_RUNS="1")
    for _ in range(3):  # a rerun or a page switch raises through the page: the next run must not wait for ever
        with pytest.raises(RuntimeError), turns.page_turn():
            raise RuntimeError("rerun")
    done = threading.Event()
    threading.Thread(target=lambda: (turns.page_turn().__enter__(), done.set()), daemon=True).start()
    assert done.wait(5)


def test_the_app_computes_its_sidebar_and_page_inside_a_turn(monkeypatch):
    """Counted through app.py's real run (AppTest): one turn taken and given back per run, the page drawn in it."""
    from harness.apptest import open_app

    seen = []

    class Counting:
        def __enter__(self):
            seen.append("in")

        def __exit__(self, *exc):
            seen.append("out")

    monkeypatch.setattr(turns, "_turns", [Counting()])
    at = open_app("tokenizer", text="turns")
    assert not at.exception and at.title and seen == ["in", "out"]  # the run that opened the page
