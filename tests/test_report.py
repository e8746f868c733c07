"""The static HTML report: Table III with cells linked to their rationale, one page per
paper with its inline diagram and highlighted spec; checked in a real headless browser."""

import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from conftest import ROOT, SPECS

TEST_STEPS = 3  # training steps per heatmap model in these tests (the report's default: 200)
EXAMPLES = ROOT / "examples"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--hide-scrollbars"]


class Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.hrefs, self.ids, self.rows, self.svgs, self.table = [], set(), {}, 0, None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.add(a["id"])
        if tag in ("a", "link") and "href" in a:
            self.hrefs.append(a["href"])
        if tag == "table":
            self.table = a.get("id")
        if tag == "tr" and self.table:
            self.rows[self.table] = self.rows.get(self.table, 0) + 1
        if tag == "svg":
            self.svgs += 1


def parse(path: Path) -> Links:
    p = Links()
    p.feed(path.read_text(encoding="utf-8"))
    return p


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("report") / "site"
    cache = tmp_path_factory.mktemp("cache")  # a few training steps, cached here
    r = subprocess.run([sys.executable, "-m", "taxcompile", "report", "specs/", "examples/",
                        "-o", str(out), "--train-steps", str(TEST_STEPS)],
                       cwd=ROOT, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "XDG_CACHE_HOME": str(cache)})
    assert r.returncode == 0, r.stderr
    return out


def test_index_has_table3_and_the_other_specs(site):
    index = parse(site / "index.html")
    assert index.rows["table3-rows"] == 1 + 17      # header + the survey's 17 papers
    # Lin et al. 2017 and the examples, except the two of Table III papers, linked from their
    # rows: Lu et al. [32]'s alternating variant, Yang et al. [5]'s document-wide word weights
    assert index.rows["other-rows"] == 1 + 1 + len(list(EXAMPLES.glob("*.attn"))) - 2
    papers = sorted(p.stem for p in (site / "papers").glob("*.html"))
    assert len(papers) == len(list(SPECS.glob("*.attn"))) + len(list(EXAMPLES.glob("*.attn")))


def test_a_table3_paper_is_listed_once(site):
    """An example of a Table III paper (Lu et al. [32], the alternating variant) is linked
    from that paper's row, not listed again among the other models."""
    text = (site / "index.html").read_text(encoding="utf-8")
    assert text.count("Lu et al.</a> [32]") == 1
    table3 = text[text.index('id="table3-rows"'):text.index('id="other-rows"')]
    assert 'also: <a href="papers/lu2016_alternating.html">alternating</a>' in table3
    page = (site / "papers" / "lu2016_alternating.html").read_text(encoding="utf-8")
    assert 'its row is\n  <a href="lu2016.html">Lu et al. [32]</a>' in page


def test_every_link_and_anchor_resolves(site):
    pages = [site / "index.html"] + sorted((site / "papers").glob("*.html"))
    parsed = {p.resolve(): parse(p) for p in pages}
    checked = 0
    for page, links in list(parsed.items()):
        for href in links.hrefs:
            target, _, anchor = href.partition("#")
            path = (page.parent / target).resolve() if target else page
            assert path.exists(), f"{page.name}: {href} does not resolve"
            if anchor:  # each page parsed once (the pages link each other thousands of times)
                if path not in parsed:
                    parsed[path] = parse(path)
                assert anchor in parsed[path].ids, f"{page.name}: no #{anchor} in {path.name}"
            checked += 1
    assert checked > 17 * 9


def test_paper_pages_inline_the_diagram_and_highlight_the_spec(site):
    from taxcompile import pipeline

    for page in sorted((site / "papers").glob("*.html")):
        text = page.read_text(encoding="utf-8")
        spec = next((d / f"{page.stem}.attn" for d in (SPECS, EXAMPLES)
                     if (d / f"{page.stem}.attn").exists()), None)
        # one diagram per model variant, each at its own width (a page named after a paper
        # of a file of several: at least one)
        svgs = parse(page).svgs
        assert svgs == len(pipeline.load(spec).models) if spec else svgs >= 1, page.name
        assert '<div class="highlight">' in text
        assert "<script" not in text
        for dim in ("feature_multiplicity", "query_multiplicity"):
            assert f'id="{dim}"' in text
    vaswani = (site / "papers" / "vaswani2017.html").read_text(encoding="utf-8")
    assert "Multi-Head + Multi-Hop" in vaswani
    assert "<li><em>Multi-Head</em>: attention <code>encoder.self</code> has 8 heads</li>" in vaswani


def test_paper_pages_show_heatmaps_and_the_generated_code(site):
    from PIL import Image

    from taxcompile import pipeline

    for spec in sorted(SPECS.glob("*.attn")):
        cs = pipeline.load(spec)
        page = site / "papers" / f"{spec.stem}.html"
        text = page.read_text(encoding="utf-8")
        for cm in cs.models:
            model = cm.model.name
            assert f'<img src="{spec.stem}/{model}.png"' in text, (page.name, model)
            png = site / "papers" / spec.stem / f"{model}.png"
            img = Image.open(png).convert("RGB")
            assert img.width > 200 and img.height > 150
            # viridis: weights drawn from dark purple to yellow, one panel per module
            colours = img.getcolors(maxcolors=1 << 24)
            assert len(colours) > 50, f"{png}: a blank heatmap"
            assert f"<code>generated/{spec.stem}_{model}.py</code>" in text
        # each heatmap says how its model was trained, and whether it learned its task: not
        # in 3 steps (greyed and labelled, its held-out loss against chance)
        assert text.count(f"{TEST_STEPS} training steps on the task") == len(cs.models)
        assert text.count("did not learn the task: held-out loss ") == len(cs.models)
        assert text.count('<figure class="heatmap not-learned">') == len(cs.models)
        # the generated code, highlighted as Python
        assert text.count('<span class="nc">Model</span>') == len(cs.models)
    vaswani = (site / "papers" / "vaswani2017.html").read_text(encoding="utf-8")
    assert "encoder.self" in vaswani and "transformer.png" in vaswani


def test_a_spec_error_writes_nothing(tmp_path):
    bad = tmp_path / "bad.attn"
    bad.write_text('paper p { cite = "X" }\nmodel m { feature x = nope(1) }\n')
    out = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "taxcompile", "report", str(bad), "-o", str(out)],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and re.search(r"bad\.attn:2:23: error: unknown feature model", r.stderr)
    assert not out.exists()


BROWSERS = ("chromium-headless-shell", "chrome-headless-shell", "chromium", "chromium-browser",
            "google-chrome", "google-chrome-stable")


def find_browser() -> str | None:
    return next((exe for exe in map(shutil.which, BROWSERS) if exe), None)


def chromium() -> str:
    """A headless Chromium: one on PATH if there is one, else the smallest that serves,
    installed with apt-get (as root) without recommends: Debian's
    chromium-headless-shell (no desktop services), or chromium where that is missing.
    Says so with a warning."""
    import warnings

    exe = find_browser()
    if exe is None and shutil.which("apt-get"):
        assert os.geteuid() == 0, ("no headless Chromium: install one with "
                                   "`sudo apt-get install -y --no-install-recommends "
                                   "chromium-headless-shell`")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        apt = ["apt-get", "-o", "DPkg::Lock::Timeout=600"]  # the other browser test may install
        subprocess.run([*apt, "update", "-qq"], check=True, timeout=600, capture_output=True,
                       env=env)
        policy = subprocess.run(["apt-cache", "policy", "chromium-headless-shell"],
                                capture_output=True, text=True, timeout=60).stdout
        package = ("chromium-headless-shell" if re.search(r"Candidate: (?!\(none\))", policy)
                   else "chromium")
        warnings.warn(f"no headless Chromium on PATH: installing Debian's {package} "
                      "(apt-get install --no-install-recommends) for the browser tests")
        subprocess.run([*apt, "install", "-y", "-qq", "--no-install-recommends", package],
                       check=True, timeout=900, capture_output=True, env=env)
        exe = find_browser()
    assert exe, "a headless Chromium is required for the browser test"
    return exe


def browse(exe: str, profile: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([exe, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
                          capture_output=True, text=True, timeout=120)


def test_report_in_a_real_browser(site, tmp_path):
    from PIL import Image

    exe = chromium()
    dom = browse(exe, tmp_path / "profile", "--dump-dom", (site / "index.html").as_uri()).stdout
    body = dom[dom.index('id="table3-rows"'):]
    body = body[: body.index("</table>")]
    assert body.count("<tr>") == 1 + 17
    # A screenshot starts a browser (about a second each): every fourth page, spread over the
    # specs and the examples; that each page inlines its diagram's SVG is checked for all of
    # them without a browser (test_paper_pages_inline_the_diagram_and_highlight_the_spec).
    for page in sorted((site / "papers").glob("*.html"))[::4]:
        shot = tmp_path / f"{page.stem}.png"
        r = browse(exe, tmp_path / "profile", "--window-size=1400,1400",
                   f"--screenshot={shot}", page.as_uri())
        assert shot.exists(), r.stderr[-2000:]
        img = Image.open(shot).convert("RGB")
        # The diagram is the first thing under the header, and every diagram has an
        # attention module, drawn in the survey's yellow (#fff2cc): that region shows it.
        region = img.crop((40, 250, 1360, 1400))
        yellow = sum(n for n, (r, g, b) in region.getcolors(maxcolors=1 << 24)
                     if abs(r - 255) < 6 and abs(g - 242) < 6 and abs(b - 204) < 8)
        assert yellow > 2000, f"{page.name}: no diagram visible ({yellow} attention pixels)"


PROBE = """<script>
window.addEventListener("load", () => {
  const out = [];
  for (const fig of document.querySelectorAll("figure.heatmap")) {
    const img = fig.querySelector("img"), cap = fig.querySelector("figcaption");
    const r = {model: cap.querySelector("code").textContent, page: fig.dataset.page};
    if (img) {
      const box = img.getBoundingClientRect(), fbox = fig.getBoundingClientRect();
      r.loaded = img.complete && img.naturalWidth > 0;
      r.width = box.width; r.natural = img.naturalWidth;
      // the title (the caption's lines): each line's text box within the image's width
      r.title = [];
      for (const span of cap.querySelectorAll("span")) {
        const range = document.createRange(); range.selectNodeContents(span);
        for (const line of range.getClientRects())
          r.title.push([line.left - box.left, line.right - box.left]);
      }
      r.overflow = cap.scrollWidth > cap.clientWidth + 1;
      // the image's own title and labels: no ink in its first and last two columns
      try {
        const c = document.createElement("canvas");
        c.width = img.naturalWidth; c.height = img.naturalHeight;
        const ctx = c.getContext("2d"); ctx.drawImage(img, 0, 0);
        let darkest = 255;
        for (const x of [0, 1, c.width - 2, c.width - 1]) {
          const d = ctx.getImageData(x, 0, 1, c.height).data;
          for (let i = 0; i < d.length; i += 4)
            darkest = Math.min(darkest, (d[i] + d[i + 1] + d[i + 2]) / 3);
        }
        r.edge = darkest;
      } catch (e) { r.edge = "tainted"; }
    }
    out.push(r);
  }
  const pre = document.createElement("pre"); pre.id = "probe";
  pre.textContent = JSON.stringify(out); document.body.appendChild(pre);
});
</script>"""


def test_no_heatmap_title_is_clipped_in_the_browser(site, tmp_path):
    """Each paper page opened in headless Chromium: every heatmap's image loads at its own
    width, its title's text boxes fit within the image, and the image itself has no text
    cut at its left and right edges (measured on a canvas in the page)."""
    import json

    from PIL import Image

    exe = chromium()
    # every heatmap of every paper page, laid out by the report's own CSS, on one page
    # (one browser start instead of one per page)
    figures = []
    for page in sorted((site / "papers").glob("*.html")):
        html = page.read_text(encoding="utf-8")
        for fig in re.findall(r'<figure class="heatmap[ \w-]*">.*?</figure>', html, re.S):
            figures.append(re.sub(r'class="(heatmap[ \w-]*)"',
                                  f'class="\\1" data-page="{page.stem}"', fig, count=1))
    papers = (site / "papers").as_uri()
    probe = tmp_path / "heatmaps.html"
    probe.write_text(f'<!DOCTYPE html>\n<html><head><meta charset="utf-8">'
                     f'<base href="{papers}/"><link rel="stylesheet" href="../style.css">'
                     f'</head><body><main>\n' + "\n".join(figures) +
                     f"\n</main>{PROBE}</body></html>\n", encoding="utf-8")
    r = browse(exe, tmp_path / "profile", "--allow-file-access-from-files",
               "--window-size=1400,1000", "--virtual-time-budget=10000", "--dump-dom",
               probe.as_uri())
    m = re.search(r'<pre id="probe">(.*?)</pre>', r.stdout, re.S)
    assert m, f"the probe did not run: {r.stderr[-1500:]}"
    seen = 0
    for f in json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&")):
        where = f"{f['page']}.html, model {f['model']}"
        assert f["loaded"] and abs(f["width"] - f["natural"]) <= 1, where
        assert f["title"] and not f["overflow"], where
        for left, right in f["title"]:
            assert left >= -1 and right <= f["width"] + 1, f"{where}: title clipped"
        if f["edge"] == "tainted":  # this Chromium keeps file:// images from canvases
            img = Image.open(site / "papers" / f["page"] / f"{f['model']}.png").convert("L")
            w, h = img.size
            f["edge"] = min(img.getpixel((x, y)) for x in (0, 1, w - 2, w - 1)
                            for y in range(h))
        assert f["edge"] > 200, f"{where}: text cut at the image's edge ({f['edge']})"
        seen += 1
    assert seen >= 27
