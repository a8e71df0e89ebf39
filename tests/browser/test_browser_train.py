"""Real browser (Debian Chromium), a newcomer's first visit end to end: a newcomer trains a model on the reverse task,
sees cross-attention form the anti-diagonal, switches to a shipped checkpoint (repeat) and generates text step by
step. With SCREENSHOTS=1, screenshots go to artifacts/screenshots/ (git-ignored)."""
import json
import time
from urllib.parse import parse_qs, urlparse

from harness.browser import (
    MAIN,
    SIDEBAR,
    assert_clean,
    choose,
    combobox_value,
    full_screenshot,
    next_token,
    pick_layer,
    press_button,
    require_browser,
    run_after,
    settle,
    view_state,
)
from harness.server import ROOT
from ui.i18n import strings

sync_api = require_browser()

SHOTS = ROOT / "artifacts" / "screenshots"
S = strings()
TRAIN_MS = 300_000  # the reverse task's defaults take 10-20 s on an idle 2-core CPU; a busy one is slower


def test_newcomer_trains_reverse_sees_the_anti_diagonal_then_generates_with_a_shipped_model(app, tab):
    page, expect = tab, sync_api.expect
    main, sidebar = page.locator(MAIN), page.locator(SIDEBAR)
    page.goto(f"{app.url}/train?model=shipped%3Areverse")  # its example text ("d a c b") is what the new model reads
    settle(page)
    run_after(page, main.locator("[data-testid='stRadio']").get_by_text("reverse", exact=True).click)
    expect(main.get_by_label(S["tr_max_iters"]["en"], exact=True).first).to_have_value("400")
    start = time.monotonic()
    main.get_by_role("button", name=S["tr_start"]["en"]).click()
    expect(main.get_by_text("step ", exact=False).first).to_be_visible()  # the live progress
    expect(main.get_by_text("Finished: 400 steps", exact=False)).to_be_visible(timeout=TRAIN_MS)
    settle(page, charts=True)
    print(f"\nreverse: 400 steps trained and saved in {time.monotonic() - start:.0f} s (browser clock)")
    full_screenshot(page, SHOTS / "train_reverse_done.png")
    assert_clean(page, app, "train page")
    accuracy = main.locator("[data-testid='stMetric']").filter(has_text=S["tr_accuracy"]["en"])
    assert float(accuracy.locator("[data-testid='stMetricValue']").inner_text().rstrip("%")) >= 95
    saved = [d for d in app.folder.iterdir() if d.is_dir() and (d / "model.safetensors").is_file()]
    assert len(saved) == 1 and (saved[0] / "card.json").is_file(), list(app.folder.iterdir())
    assert json.loads((saved[0] / "card.json").read_text())["name"] == "my-reverse"

    press_button(page, S["tr_open"]["en"])
    expect(sidebar.get_by_role("combobox", name=S["model"]["en"])).to_have_value(
        f"my-reverse · {S['kind_user']['en']}")
    main.get_by_role("link", name=S["tr_see_attention"]["en"]).first.click()
    settle(page, charts=True)
    assert urlparse(page.url).path == "/attention"
    assert parse_qs(urlparse(page.url).query)["model"] == [f"user:{saved[0].name}"]
    pick_layer(page, 1)  # the last decoder layer: the sharpest alignment
    assert combobox_value(page, S["att_block"]["en"]) == S["block_cross"]["en"]
    settle(page, charts=True)
    full_screenshot(page, SHOTS / "train_reverse_cross_attention.png")
    assert_clean(page, app, "attention page")
    heads = view_state(page)["weights"]  # every head's: (n_heads, 4 queries "= b c a", 4 keys "d a c b")
    anti = [[row.index(max(row)) for row in head] for head in heads]
    assert [3, 2, 1, 0] in anti, anti  # answer step i reads input letter L-1-i

    choose(page, S["model"]["en"], f"repeat · {S['kind_shipped']['en']}", where=SIDEBAR)
    run_after(page, page.locator("[data-testid='stSidebarNav']").get_by_text(S["nav_logits"]["en"], exact=True).click,
              charts=True)
    for n in (1, 2, 3):
        next_token(page, n)
    expect(main.get_by_text(S["log_generated"]["en"].format(n=3), exact=False)).to_be_visible()
    expect(sidebar.get_by_text(S["log_gen_count"]["en"].format(n=3))).to_be_visible()
    full_screenshot(page, SHOTS / "train_then_generate.png")
    assert_clean(page, app, "logits page")
