"""Renders docs/img/vscode-rendering.png: a spec's first lines coloured by the TextMate
grammar's scopes (tokenized by test/tokenize.js), the server's hover text for the score
mechanism (taxcompile.lsp.registry), and a real `taxcompile check` error. A rendering,
not a VS Code screenshot (VS Code cannot be run here). Run from the repository root:
    python editors/vscode/test/render_screenshot.py"""

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

from taxcompile import mechanisms
from taxcompile.lsp.registry import mechanism_hover

SPEC = Path("specs/bahdanau2015.attn")
COLORS = {"comment": "#6a9955", "string": "#ce9178", "constant": "#b5cea8",
          "keyword": "#569cd6", "entity": "#4ec9b0", "variable.parameter": "#9cdcfe",
          "variable": "#4fc1ff", "support": "#dcdcaa", "storage": "#4ec9b0"}
FONT = ImageFont.truetype("/usr/share/fonts/truetype/dejavu/DejaVuSansMono.ttf", 14)


def colour(scopes):
    for key in sorted(COLORS, key=len, reverse=True):
        if any(s.startswith(key) for s in scopes[1:]):
            return COLORS[key]
    return "#d4d4d4"


def main():
    lines = SPEC.read_text().splitlines()[:30]
    bad = SPEC.read_text().replace("= additive", "= additiv", 1)
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / SPEC.name).write_text(bad)
        err = subprocess.run([sys.executable, "-m", "taxcompile", "check", str(Path(tmp) / SPEC.name)],
                             capture_output=True, text=True)
        err = (err.stdout + err.stderr).replace(tmp + "/", "")
        (Path(tmp) / "s.attn").write_text("\n".join(lines) + "\n")
        out = subprocess.run(["node", "editors/vscode/test/tokenize.js", str(Path(tmp) / "s.attn")],
                             capture_output=True, text=True, check=True).stdout
    hover = mechanism_hover(mechanisms.REGISTRY[("score", "additive")]).splitlines()[:12]
    img = Image.new("RGB", (1100, 20 * (len(lines) + len(hover) + 10)), "#1e1e1e")
    d = ImageDraw.Draw(img)
    cw = FONT.getlength("x")
    for row in map(json.loads, out.splitlines()):
        x, y = 50 + cw * (row["col"] - 1), 10 + 20 * (row["line"] - 1)
        d.text((x, y), row["text"], font=FONT, fill=colour(row["scopes"]))
    for i in range(len(lines)):
        d.text((8, 10 + 20 * i), f"{i + 1:>3}", font=FONT, fill="#858585")
    y0 = 20 + 20 * len(lines)
    d.rectangle((40, y0, 1090, y0 + 20 * len(hover) + 30), fill="#252526", outline="#454545")
    d.text((50, y0 + 5), "Hover on `additive`:", font=FONT, fill="#cccccc")
    for i, text in enumerate(hover):
        d.text((50, y0 + 25 + 20 * i), text[:130], font=FONT, fill="#cccccc")
    y1 = y0 + 20 * len(hover) + 45
    d.text((50, y1), "Problems:", font=FONT, fill="#cccccc")
    for i, text in enumerate(err.splitlines()[:5]):
        d.text((50, y1 + 20 * (i + 1)), text[:130], font=FONT, fill="#f48771")
    img.save("docs/img/vscode-rendering.png")


if __name__ == "__main__":
    main()
