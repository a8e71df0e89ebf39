"""Real browser (Debian Chromium), the issue's "done" scenario: a newcomer trains a model on the reverse task,
sees cross-attention form the anti-diagonal, switches to a shipped checkpoint and generates text step by step.
Screenshots go to artifacts/screenshots/ (git-ignored)."""
import time

import pytest
from browser_support import ROOT, full_screenshot, page_problem, require_browser, start_app, wait_rendered

sync_api = require_browser()

SHOTS = ROOT / "artifacts" / "screenshots"
TRAIN_MS = 300_000  # the reverse task's defaults take 10-20 s on an idle 2-core CPU; a busy one is slower
# the cross-attention weights of every head in the "All heads" grid: one (queries x keys) list per heatmap
HEAD_WEIGHTS_JS = """() => {
    const plots = Array.from(document.querySelectorAll("[data-testid='stPlotlyChart'] .js-plotly-plot"));
    const heatmaps = p => p._fullData.filter(d => d.type === 'heatmap');  // decoded (data holds base64)
    return heatmaps(plots.find(p => heatmaps(p).length > 1)).map(d => Array.from(d.z, row => Array.from(row)));
}"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("user-checkpoints")
    with start_app(env={"TRANSFORMER_EXPLORER_CHECKPOINTS": str(folder)}) as (proc, url):
        yield proc, url, folder


@pytest.fixture
def page(tab):
    return tab  # conftest.py's English tab


def no_exception(page, server, where: str) -> None:
    problem = page_problem(page, server[0])
    if problem:
        pytest.fail(f"{where}: {problem}")


def test_newcomer_trains_reverse_sees_the_anti_diagonal_then_generates_with_a_shipped_model(server, page):
    expect, main = sync_api.expect, page.locator("[data-testid='stMain']")
    sidebar = page.locator("[data-testid='stSidebar']")
    page.goto(f"{server[1]}/train")
    wait_rendered(page)
    main.locator("[data-testid='stRadio']").get_by_text("reverse", exact=True).click()
    wait_rendered(page)
    expect(main.get_by_label("Iterations", exact=True).first).to_have_value("400")
    start = time.monotonic()
    main.get_by_role("button", name="Start training").click()
    expect(main.get_by_text("step ", exact=False).first).to_be_visible()  # the live progress
    expect(main.get_by_text("Finished: 400 steps", exact=False)).to_be_visible(timeout=TRAIN_MS)
    wait_rendered(page, charts=True)
    print(f"\nreverse: 400 steps trained and saved in {time.monotonic() - start:.0f} s (browser clock)")
    full_screenshot(page, SHOTS / "train_reverse_done.png")
    no_exception(page, server, "train page")
    accuracy = main.locator("[data-testid='stMetric']").filter(has_text="accuracy")
    assert float(accuracy.locator("[data-testid='stMetricValue']").inner_text().rstrip("%")) >= 95
    assert (server[2] / "my-reverse.pt").is_file() and (server[2] / "my-reverse.json").is_file()

    main.get_by_role("button", name="Open this model").first.click()
    wait_rendered(page)
    expect(sidebar.get_by_role("combobox", name="Model")).to_have_value("my-reverse · trained here")
    main.get_by_role("link", name="See its attention").first.click()
    wait_rendered(page, charts=True)
    assert "my-reverse" in page.url and "/attention" in page.url
    page.goto(page.url.replace("layer=0", "layer=1"))  # the last decoder layer: the sharpest alignment
    wait_rendered(page, charts=True)
    page.wait_for_timeout(500)
    full_screenshot(page, SHOTS / "train_reverse_cross_attention.png")
    no_exception(page, server, "attention page")
    heads = page.evaluate(HEAD_WEIGHTS_JS)  # (n_heads, 4 queries "= b c a", 4 keys "d a c b")
    anti = [[row.index(max(row)) for row in head] for head in heads]
    assert [3, 2, 1, 0] in anti, anti  # answer step i reads input letter L-1-i

    sidebar.locator("[data-testid='stSelectbox']").first.click()
    page.get_by_role("option", name="corpus-gpt · trained").click()
    wait_rendered(page, charts=True)
    page.locator("[data-testid='stSidebarNav']").get_by_text("Logits", exact=False).first.click()
    wait_rendered(page, charts=True)
    for _ in range(3):
        main.get_by_role("button", name="Append next token").click()
        wait_rendered(page, charts=True)
    expect(main.get_by_text("the last 3 generated here", exact=False)).to_be_visible()
    expect(sidebar.get_by_text("Generated tokens appended to the sequence (logits page): 3")).to_be_visible()
    full_screenshot(page, SHOTS / "train_then_generate.png")
    no_exception(page, server, "logits page")
