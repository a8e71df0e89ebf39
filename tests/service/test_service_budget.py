"""One memory budget for work in flight: reservations, refusals that name the limit, bounded waits, and its use by
trainings, uploads and traces."""
import threading
import time

import pytest

from service import budget, jobs, uploads
from service.budget import Budget, MemoryBudgetError
from service.settings import Settings
from transformer_core.model import memory
from transformer_core.model.config import PRESETS
from transformer_core.train.loop import MAX_ITERS, TrainConfig

MB = 2**20
pytestmark = pytest.mark.usefixtures("fresh_jobs", "one_torch_thread")  # conftest.py


def test_the_budget_setting_defaults_to_an_8_gb_server_and_rejects_nonsense():
    assert Settings.from_env({}).memory_budget_mb == 3072
    assert Settings.from_env({"TRANSFORMER_EXPLORER_MEMORY_BUDGET_MB": "512"}).memory_budget_mb == 512
    for bad in ("-1", "lots", "1e9", "0", "9" * 5000):
        assert Settings.from_env({"TRANSFORMER_EXPLORER_MEMORY_BUDGET_MB": bad}).memory_budget_mb == 3072


def test_a_task_bigger_than_its_share_is_refused_at_once_naming_the_limit():
    pool = Budget(1000 * MB)
    start = time.monotonic()
    with pytest.raises(MemoryBudgetError) as info:
        pool.acquire(600 * MB, "trace", wait_s=30)
    assert time.monotonic() - start < 1  # no waiting for something that can never fit
    assert info.value.code == "memory_too_big"
    text = str(info.value)
    assert "600 MB" in text and "500 MB" in text and "TRANSFORMER_EXPLORER_MEMORY_BUDGET_MB" in text
    assert "500 MB" in info.value.text("zh") and pool.in_use() == 0


def test_a_task_that_fits_waits_for_others_then_runs():
    pool = Budget(1000 * MB)
    first = pool.acquire(500 * MB, "a")
    second = pool.acquire(400 * MB, "b")
    threading.Timer(0.3, pool.release, args=(first,)).start()
    start = time.monotonic()
    with pool.reserve(500 * MB, "c", wait_s=10):
        assert 0.2 < time.monotonic() - start < 5 and pool.in_use() == 900 * MB
    assert pool.in_use() == 400 * MB
    pool.release(second)
    pool.release(second)  # twice is harmless
    assert pool.in_use() == 0


def test_a_task_that_waits_too_long_is_refused_as_busy():
    pool = Budget(1000 * MB)
    held = pool.acquire(500 * MB, "a")
    pool.acquire(400 * MB, "b")
    with pytest.raises(MemoryBudgetError) as info:
        pool.acquire(200 * MB, "c", wait_s=0.2)
    assert info.value.code == "memory_busy" and "900 of 1,000 MB" in str(info.value)
    pool.release(held)
    with pool.reserve(200 * MB, "c", wait_s=0):
        pass


def test_an_error_inside_the_block_still_releases_the_reservation():
    pool = Budget(100 * MB)
    with pytest.raises(ZeroDivisionError), pool.reserve(50 * MB, "x"):
        raise ZeroDivisionError
    assert pool.in_use() == 0 and pool.held() == []


def test_many_threads_never_hold_more_than_the_budget():
    pool = Budget(100 * MB)
    peak, lock, errors = [0], threading.Lock(), []

    def work(i):
        try:
            with pool.reserve((10 + i % 40) * MB, f"t{i}", wait_s=30):
                with lock:
                    peak[0] = max(peak[0], pool.in_use())
                time.sleep(0.002)
        except Exception as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(60)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and 0 < peak[0] <= 100 * MB and pool.in_use() == 0


def test_trace_tokens_cuts_a_long_text_to_what_fits_one_task(server_env):
    server_env(TRANSFORMER_EXPLORER_MEMORY_BUDGET_MB=1024)
    cfg = PRESETS["course-base"]
    fit = budget.trace_tokens(cfg, 1000, keep=0)
    assert 0 < fit < 1000
    assert memory.trace_bytes(cfg, fit, fit, keep=0) <= budget.task_limit() == 512 * MB
    assert budget.trace_tokens(cfg, 10, keep=0) == 10  # a short text is not cut
    assert budget.trace_tokens(cfg, 1000, keep=memory.KEEP_ALL) < fit  # keeping every layer costs more
    with budget.trace_reservation(cfg, fit, fit, keep=0):
        assert budget.current().in_use() == memory.trace_bytes(cfg, fit, fit, keep=0)
    assert budget.current().in_use() == 0
    with pytest.raises(MemoryBudgetError, match="512 MB"), budget.trace_reservation(cfg, 1000, 1000, keep=0):
        pass


def test_cut_to_fit_cuts_what_does_not_fit_and_names_the_limit_when_nothing_does(server_env, monkeypatch):
    from transformer_core.model.transformer import build_model
    from transformer_core.text.inputs import prepare
    from ui import cache

    model = build_model(PRESETS["tiny"])
    prep = prepare(model, "one two three four five six seven eight", "= a b c")
    server_env(TRANSFORMER_EXPLORER_MEMORY_BUDGET_MB=1024)
    reverse = cache.get_model("shipped:reverse", "cpu")
    assert budget.cut_to_fit(model.cfg, prep) is prep  # a short text on a small model: as it was
    monkeypatch.setattr(budget, "current", lambda: Budget(MB))  # one task: 0.5 MB, less than one course-base token
    big = PRESETS["course-base"]
    with pytest.raises(MemoryBudgetError) as info:
        budget.cut_to_fit(big, prep, keep=memory.KEEP_ALL)
    assert info.value.code == "memory_too_big"
    assert info.value.params["limit"] == "1" and info.value.params["setting"] == budget.SETTING_NAME
    assert info.value.params["mb"] == budget.to_mb(memory.trace_bytes(big, 1, 1, keep=memory.KEEP_ALL))
    # the pages' shared trace goes through the same guard (its message named no limit before)

    monkeypatch.setattr(cache, "get_model", lambda key, device: reverse)  # loaded before (loading reserves memory)
    monkeypatch.setattr(budget, "current", lambda: Budget(1024))  # 512 bytes a task: not one token of anything
    with pytest.raises(MemoryBudgetError) as info:
        cache.get_trace("shipped:reverse", "cpu", "d a c b", "= b c a", (), 0, False)
    assert info.value.code == "memory_too_big" and info.value.params["setting"] == budget.SETTING_NAME


def test_five_big_traces_at_once_take_at_most_the_budget(server_env):
    """Five sessions at once tracing 1000 tokens of the course preset (8.8 GB before): each reserves its
    estimate, the budget never holds more than its total, and the ones that cannot wait are told the server is busy."""
    server_env(TRANSFORMER_EXPLORER_MEMORY_BUDGET_MB=3072)
    cfg = PRESETS["course-base"]
    fit = budget.trace_tokens(cfg, 1000, keep=0)
    results, peak = [], [0]
    barrier = threading.Barrier(5)

    def session():
        barrier.wait()
        try:
            with budget.trace_reservation(cfg, fit, fit, keep=0):
                peak[0] = max(peak[0], budget.current().in_use())
                time.sleep(0.5)  # the forward
            results.append("ran")
        except MemoryBudgetError as exc:
            results.append(exc.code)

    threads = [threading.Thread(target=session) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert peak[0] <= 3072 * MB and results.count("ran") >= 2 and set(results) <= {"ran", "memory_busy"}


def test_a_training_too_big_for_memory_is_refused_before_it_starts():
    """Settings that pass validation and the parameter limit (a 0.1 M-parameter model) but whose activations for
    batch 512 x context 1024 would take tens of GB."""
    big = TrainConfig(text="the cat sat on the mat. " * 1500, batch_size=512, context=1024, d_model=64, n_heads=4,
                      n_layers=2, device="cpu")
    big.validate()
    with pytest.raises(Exception) as info:
        jobs.start("s1", big, "too big")
    assert getattr(info.value, "code", None) == "train_memory" and "1,536 MB" in str(info.value)
    assert jobs.get("s1") is None and budget.current().in_use() == 0


def test_a_training_holds_its_reservation_for_its_whole_life(server_env):
    server_env(TRANSFORMER_EXPLORER_MEMORY_BUDGET_MB=1024)
    tc = TrainConfig(task="copy", d_model=16, n_heads=2, n_layers=1, batch_size=8, dropout=0.0, eval_interval=0,
                     seed=0, device="cpu", max_iters=MAX_ITERS)
    job = jobs.start("s1", tc, "held")
    need = jobs.training_bytes(tc, jobs.model_config(tc, jobs.make_data(tc)))
    assert job.memory_bytes == need > 0 and budget.current().in_use() == need
    job.stop.set()
    assert job.wait(60) and budget.current().in_use() == 0


def test_a_training_that_finds_the_budget_full_is_refused_as_busy(server_env):
    server_env(TRANSFORMER_EXPLORER_MEMORY_BUDGET_MB=64)
    tc = TrainConfig(task="copy", d_model=16, n_heads=2, n_layers=1, batch_size=8, dropout=0.0, eval_interval=0,
                     seed=0, device="cpu", max_iters=10)
    with budget.reserve(32 * MB, "someone's trace"), budget.reserve(32 * MB, "another trace"):
        with pytest.raises(MemoryBudgetError) as info:
            jobs.start("s1", tc, "waits for nobody")
        assert info.value.code == "memory_busy" and jobs.get("s1") is None


def test_an_upload_holds_memory_while_it_is_checked(tmp_path, monkeypatch):
    from harness.model_files import VIEWER, exported

    seen = []
    real = uploads.checked_state
    monkeypatch.setattr(uploads, "checked_state",
                        lambda state: (seen.append(budget.current().in_use()), real(state))[1])
    uploads.import_model(exported(tmp_path), "m.safetensors", "held", owner=VIEWER)
    assert seen and seen[0] > 0 and budget.current().in_use() == 0


def test_loading_a_model_holds_its_memory_while_it_loads(monkeypatch, server_env):
    from service import catalog

    seen = []
    real = catalog.load_model
    monkeypatch.setattr(catalog, "load_model", lambda *a: (seen.append(budget.current().in_use()), real(*a))[1])
    catalog.load("shipped:copy", "cpu")
    assert seen[0] == catalog.load_bytes("shipped:copy") > 0 and budget.current().in_use() == 0
    assert catalog.load_bytes("preset:course-base@cl100k_base") == memory.param_bytes(PRESETS["course-base"])
    server_env(TRANSFORMER_EXPLORER_MEMORY_BUDGET_MB=1024)  # one task: 512 MB; the course preset is 760 MB
    with pytest.raises(MemoryBudgetError) as info:
        catalog.load("preset:course-base@cl100k_base", "cpu")
    assert info.value.code == "memory_too_big"


def test_a_small_models_trace_serves_every_layer(server_env):
    """A trace that is small whole keeps every layer's heads, so the Attention page's layer picker and the other
    pages reuse one trace per text; a long text on a big model keeps only the chosen layer's per-head maps."""
    from ui import cache

    server_env(TRANSFORMER_EXPLORER_MEMORY_BUDGET_MB=1024)
    text, tgt = "d a c b", "= b c a"
    first = cache.get_trace("shipped:reverse", "cpu", text, tgt, (), 0, False)
    assert cache.get_trace("shipped:reverse", "cpu", text, tgt, (), 1, False) is first  # no second forward
    _, trace = first
    n_layers = cache.get_model("shipped:reverse", "cpu")[0].cfg.n_layers
    assert all(trace.attention("enc_self", layer) is not None for layer in range(n_layers))
    big = PRESETS["course-base"]
    assert cache.trace_keep(big, "word " * 400, None, (), 3) == 3
    assert cache.trace_keep(big, "a short text", None, (), 3) == memory.KEEP_ALL
    assert memory.trace_bytes(big, 400, keep=memory.KEEP_ALL) > cache.WHOLE_TRACE_BYTES


def test_every_source_says_what_its_load_takes(tmp_path, monkeypatch):
    """load_bytes is each source's own method: a saved folder's weights twice, a preset's parameters, a GPT-2
    file 2.5 times, a hub model not downloaded 0 (the load says so), an unknown key 0."""
    from transformer_core.sources import Places, load_bytes, sources
    from transformer_core.train.checkpoint import WEIGHTS

    assert all(callable(getattr(s, "load_bytes", None)) for s in sources().values())
    shipped = Places().shipped_dir / "copy" / WEIGHTS
    assert load_bytes("shipped:copy") == 2 * shipped.stat().st_size
    assert load_bytes("preset:course-gpt@r50k_base") == memory.param_bytes(PRESETS["course-gpt"].replace(
        vocab_size=50257, encoding="r50k_base"))
    (tmp_path / "gpt2.safetensors").write_bytes(b"x" * 1000)
    assert load_bytes("gpt2:file:gpt2.safetensors", Places(models_dir=tmp_path)) == 2500
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    assert load_bytes("hf:smollm2-135m") == 0
    assert load_bytes("nowhere:x") == load_bytes("shipped:../etc") == 0


@pytest.mark.parametrize("name", ["course-base", "tiny"])
def test_a_forward_of_several_copies_takes_that_many_times_one_copys_bytes(name):
    """trace_reservation(batch=B) reserves B × one untraced forward rather than measuring a B-copy footprint (a
    second measurement of the model, seconds on a server's first use of it): every tensor of a forward grows with
    the batch, so the measured footprints agree to rounding."""
    cfg = PRESETS[name]
    for n in (1, 7, 64):
        for batch in (2, 3):
            measured = memory.forward_bytes(cfg, n, n, batch=batch)
            assert abs(measured - batch * memory.forward_bytes(cfg, n, n)) <= batch
    with budget.trace_reservation(cfg, 7, 7, keep=0, batch=2):
        want = max(memory.trace_bytes(cfg, 7, 7, keep=0), 2 * memory.forward_bytes(cfg, 7, 7))
        assert budget.current().in_use() == want
