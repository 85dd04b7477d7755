"""report.html in a real browser: Debian's Chromium, headless, opens the file `specmon report
--format html` wrote and we check what it rendered, not what the file says.

- The DOM after load (`--dump-dom`): every table is there with its rows and a box on the page,
  each arm's per-level table has one row per level of levels.csv, every image decoded at the
  size of the PNG it embeds, and at 800 px nothing pushes the page sideways (wide tables scroll
  in their own box). The measurement is a small script appended to a copy of the file for this
  test only; the report itself is opened unchanged for the screenshot.
- A screenshot of the whole page: each image's box holds the plot (matplotlib's blue and
  orange lines), not an empty frame.

Skipped, saying so, where Chromium is not installed (`apt-get install -y chromium`; .ci/run
installs it). `python tests/unit/test_report_browser.py` writes screenshots/specmon-report.png.
Nothing leaves the machine: the report needs no network and Chromium's own background traffic
is switched off, every host name resolving to nothing.
"""

from __future__ import annotations

import csv
import html
import json
import os
import re
import shutil
import struct
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from helpers.simproc import REPO  # noqa: E402

SESSION = REPO / "tests" / "data" / "session_demo_2arm"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="headless Chromium is not installed (apt-get install -y chromium; .ci/run installs it)")

# Appended to a copy of report.html: measures after the load event (images decoded) and leaves
# the figures in a <pre> that --dump-dom prints.
CHECK_JS = """
<script>
window.addEventListener("load", () => {
  const box = (e) => { const r = e.getBoundingClientRect();
    return {x: r.left + scrollX, y: r.top + scrollY, w: r.width, h: r.height}; };
  const titleOf = (t) => { const w = t.closest(".wide") || t; const h = w.previousElementSibling;
    return h && h.tagName === "H3" ? h.textContent : null; };
  const out = {
    tables: [...document.querySelectorAll("table")].map((t) => ({
      title: titleOf(t), rows: t.tBodies.length ? t.tBodies[0].rows.length : 0,
      cols: t.tHead ? t.tHead.rows[0].cells.length : 0, box: box(t), wrap: box(t.closest(".wide") || t),
      firstCells: t.tBodies.length ? [...t.tBodies[0].rows].map((r) => r.cells[0].textContent) : []})),
    images: [...document.images].map((i) => ({alt: i.alt, complete: i.complete,
      natural: [i.naturalWidth, i.naturalHeight], box: box(i)})),
    page: {scrollWidth: document.documentElement.scrollWidth, scrollHeight: document.documentElement.scrollHeight,
           innerWidth: innerWidth},
  };
  const pre = document.createElement("pre");
  pre.id = "specmon-check";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>
"""


def chromium(*args: str, profile: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    cmd = [CHROMIUM, "--headless", "--disable-gpu", "--hide-scrollbars", "--no-first-run", "--no-default-browser-check",
           "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-extensions",
           "--host-resolver-rules=MAP * ~NOTFOUND", f"--user-data-dir={profile}", *args]
    if os.geteuid() == 0:
        cmd.insert(1, "--no-sandbox")  # Chromium will not start as root without it (CI runs as root)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=str(profile.parent))
    assert p.returncode == 0, p.stderr[-2000:]
    return p


def write_report(out: Path) -> Path:
    p = subprocess.run([sys.executable, "-m", "specmon", "report", str(SESSION.relative_to(REPO)), "--format", "html",
                        "--out", str(out)],
                       capture_output=True, text=True, timeout=180, cwd=str(REPO))
    assert p.returncode == 0, p.stderr
    return Path(p.stdout.strip())


def measure(report: Path, width: int, work: Path) -> dict:
    copy = work / f"check-{width}.html"
    copy.write_text(report.read_text(encoding="utf-8").replace("</body>", CHECK_JS + "</body>"), encoding="utf-8")
    p = chromium("--dump-dom", "--virtual-time-budget=10000", f"--window-size={width},1000", copy.as_uri(),
                 profile=work / f"profile-{width}")
    m = re.search(r'<pre id="specmon-check">(.*?)</pre>', p.stdout, re.S)
    assert m, "the check script did not run (no result in the DOM):\n" + p.stdout[-1000:]
    return json.loads(html.unescape(m.group(1)))


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()[:24]
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    return struct.unpack(">II", data[16:24])


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    return write_report(tmp_path_factory.mktemp("report"))


@pytest.fixture(scope="module")
def wide(report, tmp_path_factory) -> dict:
    return measure(report, 1200, tmp_path_factory.mktemp("chromium"))


def test_tables_render_with_their_rows(report, wide):
    source = report.read_text(encoding="utf-8")
    assert len(wide["tables"]) == source.count("<table>") >= 5  # arms, two per-level, knees, matched
    for t in wide["tables"]:
        assert t["rows"] >= 1 and t["cols"] >= 2, t
        assert t["box"]["w"] > 100 and t["box"]["h"] > 20 * t["rows"] / 2, t  # laid out, not collapsed
    with open(SESSION / "levels.csv", newline="") as f:
        levels = Counter(r["arm"] for r in csv.DictReader(f))
    per_arm = {t["title"]: t for t in wide["tables"] if t["title"] in levels}
    assert set(per_arm) == set(levels) == {"fp8-mtp", "nvfp4-mtp"}
    for arm, n in levels.items():
        assert per_arm[arm]["rows"] == n, arm
        assert per_arm[arm]["firstCells"][:3] == ["10", "14", "16"]  # the offered C of the first levels


def test_images_decode_at_their_png_size(report, wide):
    pngs = {p.stem: png_size(p) for p in report.parent.glob("*.png")}
    assert len(pngs) == 5
    assert sorted(i["alt"] for i in wide["images"]) == sorted(pngs)
    for i in wide["images"]:
        assert i["complete"] and i["natural"] == list(pngs[i["alt"]]), i
        assert 0 < i["box"]["w"] <= wide["page"]["innerWidth"] and i["box"]["h"] > 100, i


def test_a_narrow_window_scrolls_tables_not_the_page(report, tmp_path):
    narrow = measure(report, 800, tmp_path)
    page = narrow["page"]
    assert page["scrollWidth"] <= page["innerWidth"], page
    for t in narrow["tables"]:
        assert t["wrap"]["w"] <= page["innerWidth"], t  # its box fits the window
    # the 20-column per-level tables are wider than 800 px: they scroll inside their box
    assert any(t["box"]["w"] > t["wrap"]["w"] for t in narrow["tables"] if t["title"] == "fp8-mtp")


def test_the_screenshot_shows_the_plots(report, wide, tmp_path):
    from PIL import Image

    width, height = 1200, int(wide["page"]["scrollHeight"]) + 20
    shot = tmp_path / "page.png"
    chromium(f"--screenshot={shot}", f"--window-size={width},{height}", report.as_uri(), profile=tmp_path / "profile")
    im = Image.open(shot).convert("RGB")
    assert im.size == (width, height)
    top = im.crop((0, 0, width, 600))
    white = sum(n for n, px in top.getcolors(width * 600) if px == (255, 255, 255))
    assert width * 600 - white > 0.03 * width * 600  # text and tables drawn
    for i in wide["images"]:
        b = i["box"]
        area = im.crop((int(b["x"]), int(b["y"]), int(b["x"] + b["w"]), int(b["y"] + b["h"])))
        colours = area.getcolors(area.width * area.height)
        blue = sum(n for n, (r, g, bl) in colours if abs(r - 0x1F) < 40 and abs(g - 0x77) < 40 and abs(bl - 0xB4) < 40)
        assert len(colours) > 20 and blue > 200, (i["alt"], len(colours), blue)  # matplotlib's first line colour


def main(dest: Path) -> None:
    """Write screenshots/specmon-report.png: the top of report.html for the demo's recording."""
    import tempfile

    from PIL import Image

    with tempfile.TemporaryDirectory(prefix="specmon-report-shot-") as d:
        work = Path(d)
        report = write_report(work / "report")
        shot = work / "shot.png"
        chromium(f"--screenshot={shot}", "--window-size=1300,1500", report.as_uri(), profile=work / "profile")
        Image.open(shot).convert("RGB").quantize(colors=64, method=Image.Quantize.MEDIANCUT).save(
            dest, optimize=True)
    print(f"{dest}: {dest.stat().st_size // 1024} KiB")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "screenshots" / "specmon-report.png")
