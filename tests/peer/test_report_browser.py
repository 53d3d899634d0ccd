"""report.html in a real browser: headless Chromium (Debian's `chromium`) opens the report with
the network cut off, and we check that there is no console message at all (errors, CSP refusals),
that every figure drew non-blank pixels, that hostile strings from the results stayed text, and
save a screenshot.

The sample results come from real library runs (tests/tools/report_sample.hpp through
`qc_render_report --sample`): synthetic operands, C2 predictions, `verify` of cpu:vllm-cutlass
against a mutant arm (so the verdict table shows passes and fails), a teacher-forced transfer,
and two manifests joined under the identity contract.
"""
import html.parser
import os
import pathlib
import re
import shutil
import struct
import tempfile

import pytest

from conftest import run, tool

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHARTJS_CANDIDATES = [
    "/usr/share/javascript/chart.js/chart.umd.js",
    "/usr/share/javascript/chart.js/chart.min.js",
    "/usr/share/javascript/chart.js/chart.js",
]
EXPECTED_FIGURES = 5  # headroom, difference rate, max ulp, sweep, transfer


def chartjs_path():
    env = os.environ.get("QCONFORM_CHARTJS")
    if env:
        return env if os.path.isfile(env) else None
    return next((p for p in CHARTJS_CANDIDATES if os.path.isfile(p)), None)


def need_chromium():
    if CHROMIUM is None:
        pytest.skip("SKIPPED: chromium is not installed (Debian package `chromium`; scripts/install-deps.sh should install it)")


def chromium(args, workdir, timeout=180):
    """Runs headless Chromium with the network cut off; returns (stdout, stderr)."""
    profile = pathlib.Path(workdir) / f"profile-{len(list(pathlib.Path(workdir).glob('profile-*')))}"
    cmd = [
        CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--no-default-browser-check",
        "--disable-extensions", "--disable-background-networking", "--disable-component-update",
        "--host-resolver-rules=MAP * ~NOTFOUND",  # no name resolves: nothing can be fetched
        f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0",
        "--virtual-time-budget=10000", "--hide-scrollbars",
    ] + args
    p = run(cmd, check=False, timeout=timeout)
    assert p.returncode == 0, f"chromium exited {p.returncode}\n{p.stderr[-4000:]}"
    return p.stdout, p.stderr


def console_lines(stderr):
    # Chromium logs every console message (console.*, uncaught exceptions, CSP refusals) as
    # `...:INFO:CONSOLE(<line>)] "<message>", source: <url> (<line>)`. The report logs nothing
    # on purpose, so any such line is a failure.
    return [line for line in stderr.splitlines() if re.search(r":CONSOLE[:(]", line)]


class Dom(html.parser.HTMLParser):
    """The few things we read back from --dump-dom."""

    def __init__(self):
        super().__init__()
        self.body = {}
        self.canvases = []
        self.title = ""
        self.in_title = False
        self.imgs = []
        self.scripts = 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "body":
            self.body = a
        elif tag == "canvas":
            self.canvases.append(a)
        elif tag == "title":
            self.in_title = True
        elif tag == "img":
            self.imgs.append(a)
        elif tag == "script":
            self.scripts += 1

    def handle_endtag(self, tag):
        if tag == "title":
            self.in_title = False

    def handle_data(self, data):
        if self.in_title:
            self.title += data


def render_with_chartjs(sample, name, without_it):
    """The sample results rendered to `name` with Chart.js inlined; SKIPPED, saying `without_it` (what a
    report without Chart.js would lack), where Chromium or Chart.js is missing."""
    need_chromium()
    chartjs = chartjs_path()
    if chartjs is None:
        pytest.skip(f"SKIPPED: Chart.js not found (Debian package libjs-chart.js): {without_it}")
    report = sample / name
    run([tool("qc_render_report"), sample / "results.json", report, "--chartjs", chartjs])
    return report


def dump_dom(report, workdir, args=()):
    """Chromium's DOM of `report` after its scripts ran (`--dump-dom`): (the parsed Dom, its text, stderr)."""
    out, err = chromium([*args, "--dump-dom", report.as_uri()], workdir)
    dom = Dom()
    dom.feed(out)
    return dom, out, err


def assert_no_console(stderr):
    console = console_lines(stderr)
    assert not console, "console messages in the report:\n" + "\n".join(console)


def png_size(path):
    data = pathlib.Path(path).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", data[16:24])


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    d = tmp_path_factory.mktemp("report")
    run([tool("qc_render_report"), "--sample", d, "--arm-b", "mutant:extra-bf16-rounding", "--hostile"])
    return d


def test_report_renders_every_figure_without_console_errors(sample):
    report = render_with_chartjs(sample, "report.html", "the report would have no figures")
    text = report.read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text), "the report references something outside itself"

    dom, out, err = dump_dom(report, sample)
    assert_no_console(err)
    assert dom.body.get("data-js-errors") == "0", dom.body
    assert dom.body.get("data-charts-expected") == str(EXPECTED_FIGURES), dom.body
    assert dom.body.get("data-charts-rendered") == str(EXPECTED_FIGURES), dom.body
    assert dom.body.get("data-charts-status") == "ok", dom.body
    assert len(dom.canvases) == EXPECTED_FIGURES
    for c in dom.canvases:
        assert c.get("data-rendered") == "true", f"figure {c.get('id')} ({c.get('aria-label')}) drew nothing: {c}"
        assert int(c.get("data-ink-pixels", "0")) > 1000, f"figure {c.get('id')} is nearly blank: {c}"
    assert dom.title.endswith(f"[charts {EXPECTED_FIGURES}/{EXPECTED_FIGURES}]"), dom.title
    # Hostile strings from the results stayed text: no injected element ran or exists.
    assert "pwned" not in dom.title, dom.title
    assert not dom.imgs, f"an <img> element was injected: {dom.imgs}"
    assert dom.scripts == 3, f"expected our 3 <script> elements, found {dom.scripts}"
    # ... and is displayed as text (text nodes serialise with only <, > and & escaped).
    assert """&lt;img src=x onerror="document.title='pwned'"&gt;""" in out

    # Screenshot, for people to look at (kept in a temporary folder; path printed).
    shots = pathlib.Path(os.environ.get("QCONFORM_ARTIFACTS", tempfile.mkdtemp(prefix="qconform-report-")))
    shots.mkdir(parents=True, exist_ok=True)
    shot = shots / "report.png"
    chromium([f"--screenshot={shot}", "--window-size=1280,5200", report.as_uri()], sample)
    w, h = png_size(shot)
    assert (w, h) == (1280, 5200), (w, h)
    assert shot.stat().st_size > 100_000, f"screenshot {shot} is suspiciously small ({shot.stat().st_size} bytes)"
    print(f"screenshot: {shot}")


def test_report_fits_1280_pixels_with_the_answer_first_and_manifests_collapsed(sample):
    """At 1280 px the page has no horizontal scroll; the answer banner comes before the verdict table;
    the manifests sit collapsed in a <details> under the identity contract."""
    report = render_with_chartjs(sample, "report-1280.html", "the layout script does not run")
    dom, out, _ = dump_dom(report, sample, ["--window-size=1280,2000"])
    scroll, viewport = int(dom.body.get("data-scroll-width", "0")), int(dom.body.get("data-viewport-width", "0"))
    assert 0 < viewport <= 1280 and scroll <= viewport, f"horizontal scroll at 1280 px: {scroll} > {viewport}"
    assert out.index('id="qc-answer"') < out.index('id="verdicts"'), "the answer must come first"
    details = re.search(r'<details class="data" id="qc-manifests"([^>]*)>', out)
    assert details and "open" not in details.group(1), "the manifests must be collapsed"


def test_tables_only_when_chartjs_is_missing(sample, tmp_path):
    need_chromium()
    report = tmp_path / "report.html"
    run([tool("qc_render_report"), sample / "results.json", report, "--chartjs", tmp_path / "missing-chart.js"])
    dom, out, err = dump_dom(report, tmp_path)
    assert_no_console(err)
    assert dom.body.get("data-charts-status") == "omitted", dom.body
    assert dom.body.get("data-charts-expected") == "0", dom.body
    assert not dom.canvases and dom.scripts == 0
    assert "Charts were omitted: Chart.js was not found" in out
    # Tables carry the numbers: every layer of the prediction is in the page.
    assert out.count("model.layers.1.mlp.down_proj") >= 2  # headroom and differences tables
