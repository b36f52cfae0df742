"""The page's layout: the run bar on every tab without scrolling, no tab taller than about
two screens at 1600x1000 with its groups open, and the monitor usable at 390x844 (a phone)."""

from pathlib import Path

import pytest

from tests.browser.page_helpers import open_page

pytestmark = pytest.mark.browser

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"

TABS = ("Start here", "General", "Model", "Data", "Training", "Sampling", "Backup", "LoRA", "Concepts", "Run", "Tools", "Runs")
# about two screens of 1000 px (plus the header and the run bar); the tallest is the Model tab at
# ~2,040 px (the Concepts tab was ~2,320 px with one field a row; in the grid it is ~1,710)
MAX_HEIGHT = 2150
# The Training tab was 7,477 px at first and 3,341 px with its groups in 4 columns; in 6
# columns, with the denoiser's settings across the width, it is ~2,000 px.
MAX_HEIGHT_TRAINING = 2150


def _open(page, url):
    open_page(page, url)
    page.wait_for_selector("#start")
    page.wait_for_selector("#f-model_type")


def _open_tab(page, name):
    """A tab by name; on a narrow screen gradio moves the tabs that do not fit into a menu."""
    tab = page.get_by_role("tab", name=name, exact=True)
    if not tab.is_visible():
        page.locator(".overflow-menu button, button.overflow-menu").first.click()
        page.locator(".overflow-dropdown button, .overflow-item-visible button").filter(has_text=name).first.click()
        return
    tab.click()


def _in_viewport(page, selector):
    return page.evaluate(
        """(sel) => { const e = document.querySelector(sel); if (!e) return false; const r = e.getBoundingClientRect();
           return r.width > 0 && r.height > 0 && r.top >= 0 && r.bottom <= window.innerHeight && r.left >= 0
                  && r.right <= window.innerWidth; }""", selector)


def _queue_length_in_bar(page):
    """The queue's length is inside the run bar, whole (not squeezed into a sliver) and readable."""
    return page.evaluate(
        """() => { const bar = document.querySelector('#ot-run-bar'), q = document.querySelector('#queue-length');
           if (!bar || !q || !bar.contains(q)) return false;
           const r = q.getBoundingClientRect(), b = bar.getBoundingClientRect();
           return /^Queue: (empty|\\d+ waiting)$/.test(q.innerText.trim()) && q.scrollWidth <= q.clientWidth + 1  // no "0.6s" of a poll either
                  && r.top >= b.top && r.bottom <= b.bottom && r.right <= b.right + 1; }""")


def test_run_bar_on_every_tab_and_no_tab_taller_than_two_screens(module_app, module_page):
    page = module_page
    _open(page, module_app["url"])
    heights = {}
    for name in TABS:
        tab = page.get_by_role("tab", name=name, exact=True)
        if not tab.is_visible():
            continue
        tab.click()
        page.evaluate("window.scrollTo(0, 0)")
        page.wait_for_timeout(500)
        assert _in_viewport(page, "#start"), f"Start is not in view on the {name} tab"
        assert _in_viewport(page, "#stop") and _in_viewport(page, "#run-bar-status"), name
        assert _in_viewport(page, "#queue-length") and _queue_length_in_bar(page), f"the queue's length is not in the run bar on the {name} tab"
        heights[name] = page.evaluate("document.documentElement.scrollHeight")
        orphans = page.evaluate("""() => [...document.querySelectorAll('button[id$=-browse]')].filter(b => b.offsetParent !== null)
            .filter(b => { const f = document.getElementById(b.id.slice(0, -'-browse'.length)); return !f || f.offsetParent === null; })
            .map(b => b.id)""")
        assert not orphans, f"Browse buttons without their path field on the {name} tab: {orphans}"
        page.evaluate("window.scrollTo(0, document.documentElement.scrollHeight)")  # sticky: still there at the bottom
        page.wait_for_timeout(300)
        assert _in_viewport(page, "#start"), f"Start scrolled away on the {name} tab"
        assert _in_viewport(page, "#queue-length"), f"the queue's length scrolled away on the {name} tab"
    (ARTIFACTS / "tab-heights.txt").write_text("\n".join(f"{k}: {v}" for k, v in heights.items()))
    assert {"Training", "Run", "Model"} <= set(heights)
    too_tall = {k: v for k, v in heights.items() if v > (MAX_HEIGHT_TRAINING if k == "Training" else MAX_HEIGHT)}
    assert not too_tall, f"tabs too tall at 1600x1000: {too_tall}"
    # the old footer below all tabs is gone: the charts and the log are on the Run tab only
    page.get_by_role("tab", name="Training", exact=True).click()
    assert not page.locator("#loss-plot").is_visible() and not page.locator("#log-tail").is_visible()
    page.get_by_role("tab", name="Run", exact=True).click()
    assert page.locator("#loss-plot").is_visible() and page.locator("#sample-now").is_visible()


def test_monitor_at_390x844_has_no_horizontal_scrolling(module_app, module_browser):
    page = module_browser.new_page(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
    page.set_default_timeout(60_000)
    try:
        _open(page, module_app["url"])
        assert _in_viewport(page, "#start") and _in_viewport(page, "#stop") and _in_viewport(page, "#run-bar-status")
        assert _in_viewport(page, "#queue-length") and _queue_length_in_bar(page)
        # Start here's Open ... buttons go under their step's text at a button's height (beside it they
        # took half the width and stretched to the text's height, up to ~500 px)
        step = page.locator("#guide-step-1").bounding_box()
        assert step is not None and step["height"] <= 60, f"the guide's first button at 390 px: {step}"
        _open_tab(page, "Run")
        page.wait_for_timeout(500)
        width = page.evaluate("[document.documentElement.scrollWidth, document.documentElement.clientWidth]")
        assert width[0] <= width[1], f"the page scrolls sideways at 390 px: {width}"
        for sel in ("#loss-plot", "#lr-run-plot", "#sample-gallery", "#run-details", "#sample-now", "#save-now"):
            box = page.locator(sel).bounding_box()
            assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 390 + 1, f"{sel} is cut off: {box}"
        page.screenshot(path=str(ARTIFACTS / "page-390x844-run.png"), full_page=True)
    finally:
        page.close()


def test_at_390x844_the_sticky_run_bar_takes_a_quarter_of_the_screen_and_the_model_type_is_whole(module_app, module_browser):
    """On a phone the run bar, which stays on top while scrolling, leaves the page three quarters of
    the screen (it took 350 of 844 px); a refused Start's list is read whole (it showed half of one
    line, in a box that scrolled), the bar then scrolling away with the page so that it does not
    cover the form the fixes are made in; the model type's dropdown shows its whole value."""
    from ot_gradio.config.families import implemented_model_types

    page = module_browser.new_page(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
    page.set_default_timeout(60_000)
    try:
        _open(page, module_app["url"])
        page.wait_for_timeout(500)
        # the bar as a run fills it: its status line and two progress bars (monitor.bar_markdown, progress_html)
        page.evaluate("""() => {
            document.querySelector('#run-bar-status .prose, #run-bar-status').innerHTML =
                '<p><strong>training</strong> · step 34/60 · ETA 120 s · loss 0.1234 (smoothed)</p>';
            document.querySelector('#run-progress').innerHTML =
                '<div class="ot-bar"><span>epoch 3/5</span><progress max="100" value="40"></progress> 40%</div>' +
                '<div class="ot-bar"><span>step 34/60</span><progress max="100" value="57"></progress> 57%</div>'; }""")
        page.wait_for_timeout(200)
        bar = page.evaluate("() => { const r = document.querySelector('#ot-run-bar').getBoundingClientRect(); return {height: r.height}; }")
        assert bar is not None and bar["height"] <= 844 / 4, f"the run bar is {bar['height']:.0f} px high at 390x844"
        assert page.evaluate("() => getComputedStyle(document.querySelector('#ot-run-bar')).position") == "sticky"
        assert _in_viewport(page, "#start") and _in_viewport(page, "#stop") and _queue_length_in_bar(page)
        page.evaluate("""() => { document.querySelector('#problems .prose, #problems').innerHTML =
            '<p><strong>Cannot start:</strong></p><ul>' +
            '<li><code>Concept 1 \\'mycat\\' → Folder: folder /home/me/pictures/cat has no images</code></li>' +
            '<li><code>Training → Batch size: must be >= 1</code></li>' +
            '<li><code>Model → Base model: empty; enter a Hugging Face id (owner/name), a diffusers folder or a .safetensors file</code></li></ul>'; }""")
        page.wait_for_timeout(200)
        listed = page.evaluate("""() => { const p = document.querySelector('#problems');
            return [getComputedStyle(document.querySelector('#ot-run-bar')).position, p.scrollHeight, p.clientHeight,
                    p.scrollWidth, p.clientWidth, p.innerText]; }""")
        assert listed[0] == "static" and listed[1] <= listed[2] + 1 and listed[3] <= listed[4] + 1, listed  # whole, unclipped
        assert "a .safetensors file" in listed[5]
        # the longest model type the trainer offers, in the input's own font, fits the input
        longest = max((m.value for m in implemented_model_types()), key=len)
        shown = page.evaluate(
            """(longest) => { const i = document.querySelector('#f-model_type input'); if (!i) return null;
               const s = getComputedStyle(i), c = document.createElement('canvas').getContext('2d');
               c.font = s.font; const pad = parseFloat(s.paddingLeft) + parseFloat(s.paddingRight);
               return [i.value, i.scrollWidth, i.clientWidth, c.measureText(longest).width, i.clientWidth - pad]; }""", longest)
        assert shown and shown[0] and shown[1] <= shown[2] + 1, f"the model type is cut: {shown}"
        assert shown[3] <= shown[4] + 1, f"{longest} would be cut in the model type's field: {shown}"
    finally:
        page.close()
