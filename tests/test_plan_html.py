"""`inferstack plan --html`: one self-contained page, checked by parsing it (always) and, when Debian's
Chromium is installed, by rendering it headless to a PNG that must not be blank (CI need not have it)."""

from __future__ import annotations

import shutil
import struct
import subprocess
import xml.etree.ElementTree as ET
import zlib
from html.parser import HTMLParser
from pathlib import Path

import pytest

from inferstack.cli import main
from inferstack.engine import run_stack
from inferstack.presentation.html import PALETTE, render_html
from inferstack.presentation.summary import build_plan
from inferstack.stacks import load_stack

STACKS = Path(__file__).resolve().parents[1] / "stacks"


class Page(HTMLParser):
    """Every tag with its attributes, the text, and each inline <svg> as its own source text."""

    def __init__(self, source: str) -> None:
        super().__init__(convert_charrefs=True)
        self.source, self.tags, self.text, self.svgs, self._lines = source, [], [], [], source.splitlines(keepends=True)
        self._svg_start: int | None = None
        self.feed(source)

    def _offset(self) -> int:
        line, column = self.getpos()
        return sum(len(text) for text in self._lines[: line - 1]) + column

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag == "svg":
            self._svg_start = self._offset()

    def handle_endtag(self, tag):
        if tag == "svg" and self._svg_start is not None:
            end = self.source.index("</svg>", self._offset()) + len("</svg>")
            self.svgs.append(ET.fromstring(self.source[self._svg_start:end]))   # well-formed XML, or this raises
            self._svg_start = None

    def handle_data(self, data):
        self.text.append(data)

    def svg(self, css_class: str, **data: str) -> ET.Element:
        (found,) = [s for s in self.svgs if s.get("class") == css_class
                    and all(s.get(f"data-{k}") == v for k, v in data.items())]
        return found


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    """prod through the CLI (`plan prod --html FILE`), dev through render_html; with their plans."""
    out = tmp_path_factory.mktemp("html") / "prod.html"
    assert main(["plan", "prod", "--stacks-dir", str(STACKS), "--json", "--html", str(out)]) == 0
    built = {}
    for name in ("dev", "prod"):
        spec = load_stack(STACKS, name)
        built[name] = build_plan(spec, run_stack(spec))
    return {"prod": (out.read_text(encoding="utf-8"), built["prod"], out),
            "dev": (render_html(built["dev"]), built["dev"], None)}


@pytest.mark.parametrize("name", ["dev", "prod"])
def test_the_page_is_self_contained(pages, name):
    source, _, _ = pages[name]
    page = Page(source)
    assert "http:" not in source and "https:" not in source and "//" not in source.replace("<!--", "")
    assert not [tag for tag, _ in page.tags if tag in ("script", "link", "img", "iframe", "object", "embed")]
    assert not [attrs for _, attrs in page.tags if "src" in attrs]
    assert all(attrs["href"].startswith("#") for _, attrs in page.tags if "href" in attrs)   # in-page links only
    assert "@import" not in source and "url(" not in source


@pytest.mark.parametrize("name", ["dev", "prod"])
def test_every_pool_and_its_cost_is_on_the_page(pages, name):
    source, plan, _ = pages[name]
    page = Page(source)
    sections = {attrs["id"] for tag, attrs in page.tags if tag == "section" and attrs.get("id", "").startswith("pool-")}
    assert sections == {f"pool-{p['name']}" for p in plan["node_pools"]}
    text = " ".join(page.text)
    for pool in plan["node_pools"]:
        assert f"${pool['usd_per_hour']['min']:,.2f}/h" in text and f"${pool['usd_per_hour']['max']:,.2f}/h" in text
        if pool["spot"]:
            assert f"spot {pool['spot']['assumed_discount']:.0%} off" in text


def test_a_spot_pool_the_snapshot_does_not_price_says_so_instead_of_failing():
    """p5.4xlarge has no spot figure in us-east-1 in catalog/spot_prices.json: its pool's spot share is unpriced."""
    from inferstack.spec import StackSpec

    spec = load_stack(STACKS, "dev")
    raw = spec.model_dump(mode="json", exclude_unset=True)
    pool = raw["node_pools"][0]
    pool["instance_types"] = ["p5.4xlarge"]
    pool.setdefault("capacity", {})["spot"] = True
    raw.pop("budget", None)             # a budget over an unpriced pool is refused; the page is what is tested
    spec = StackSpec.model_validate(raw)
    plan = build_plan(spec, run_stack(spec))
    assert plan["node_pools"][0]["spot"]["assumed_discount"] is None
    text = " ".join(Page(render_html(plan)).text)
    assert "spot unpriced" in text


@pytest.mark.parametrize("name", ["dev", "prod"])
def test_every_model_is_drawn_in_place_on_its_pool(pages, name):
    source, plan, _ = pages[name]
    page = Page(source)
    for row in plan["placements"]:
        drawing = page.svg("pool-svg", pool=row["pool"])
        drawn = [g for g in drawing.iter("g") if g.get("class") == "replica" and g.get("data-model") == row["model"]]
        assert drawn, row["model"]
        assert all(g.find("rect") is not None and g.find("title").text for g in drawn)


def test_prod_draws_gpus_slices_and_multi_node_replicas(pages):
    source, plan, _ = pages["prod"]
    page = Page(source)
    h100 = page.svg("pool-svg", pool="h100")
    nodes = [r for r in h100.iter("rect") if r.get("class") == "node"]
    assert len(nodes) == 3 and sum(1 for r in h100.iter("rect") if r.get("class") == "gpu") == 24
    assert [r.get("stroke-dasharray") for r in nodes] == [None, None, "5 4"]   # the third node: beyond min scale

    def replicas(drawing, model):
        return [g.find("title").text for g in drawing.iter("g") if g.get("data-model") == model]

    # The 16-GPU replica spans both on-demand nodes; two 4-GPU replicas share the third.
    assert len(replicas(h100, "llama-70b-long")) == 2 and len(replicas(h100, "llama-70b")) == 2
    mig = page.svg("pool-svg", pool="a100-mig")
    # Eight GPUs of four slices each (3g + 2g + 1g + 1g); bge-embed's two replicas on 1g.10gb slices.
    assert sum(1 for g in mig.iter("g") if g.get("class") in ("slot", "replica")) == 8 * 4
    assert sorted(replicas(mig, "bge-embed")) == ["bge-embed replica 1 on 1g.10gb", "bge-embed replica 2 on 1g.10gb"]


@pytest.mark.parametrize("name", ["dev", "prod"])
def test_every_step_of_each_critical_path_is_on_the_page(pages, name):
    source, plan, _ = pages[name]
    page = Page(source)
    text = " ".join(page.text)
    for model in plan["time_to_serving"]["models"]:
        chart = page.svg("path-svg", model=model["model"])
        drawn = [g.get("data-step") for g in chart.iter("g") if g.get("class") == "step"]
        assert drawn == [step["name"] for step in model["critical_path"]]
        for step in model["critical_path"]:
            assert step["name"] in text


def test_the_cli_writes_the_page_beside_the_json(pages, capsys):
    _, _, path = pages["prod"]
    assert path.stat().st_size > 10_000
    assert main(["plan", "prod", "--stacks-dir", str(STACKS), "--html", str(path.parent / "missing" / "x.html")]) == 2
    assert "cannot write" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------- a real browser


def png_pixels(data: bytes) -> tuple[int, int, list[tuple[int, ...]]]:
    """(width, height, pixels) of an 8-bit RGB or RGBA PNG, decoded with the standard library."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    position, chunks, header = 8, [], None
    while position < len(data):
        (length,), kind = struct.unpack(">I", data[position:position + 4]), data[position + 4:position + 8]
        body = data[position + 8:position + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            chunks.append(body)
        position += 12 + length
    width, height, depth, colour, _, _, interlace = header
    assert depth == 8 and colour in (2, 6) and interlace == 0
    step = 4 if colour == 6 else 3
    stride, raw = width * step, zlib.decompress(b"".join(chunks))
    previous, pixels = bytearray(stride), []
    for row in range(height):
        kind, line = raw[row * (stride + 1)], bytearray(raw[row * (stride + 1) + 1:(row + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - step] if i >= step else 0
            up, corner = previous[i], previous[i - step] if i >= step else 0
            if kind == 1:
                line[i] = (line[i] + left) & 255
            elif kind == 2:
                line[i] = (line[i] + up) & 255
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 255
            elif kind == 4:
                p = left + up - corner
                near = min((abs(p - left), 0, left), (abs(p - up), 1, up), (abs(p - corner), 2, corner))[2]
                line[i] = (line[i] + near) & 255
        pixels += [tuple(line[i:i + 3]) for i in range(0, stride, step)]
        previous = line
    return width, height, pixels


@pytest.mark.skipif(shutil.which("chromium") is None, reason="Debian's chromium is not installed")
def test_chromium_renders_the_page_with_the_pools_drawn(pages, tmp_path):
    _, plan, path = pages["prod"]
    shot = tmp_path / "plan.png"
    subprocess.run(
        ["chromium", "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", f"--user-data-dir={tmp_path / 'profile'}",
         "--force-device-scale-factor=0.5", "--window-size=1100,1600", f"--screenshot={shot}", path.as_uri()],
        check=True, capture_output=True, timeout=90,
    )
    width, height, pixels = png_pixels(shot.read_bytes())
    assert (width, height) == (550, 800)   # the window at half scale, to keep decoding quick
    white = sum(1 for p in pixels if min(p) > 245)
    assert white < 0.9 * len(pixels) and len(set(pixels)) > 50, "the page rendered blank"
    # The h100 models' fills (the first two placements) are on screen: the pool drawing rendered, not only text.
    assert [row["model"] for row in plan["placements"][:2]] == ["llama-70b", "llama-70b-long"]
    colours = {tuple(int(c[i:i + 2], 16) for i in (1, 3, 5)) for c in PALETTE[:2]}
    assert colours <= set(pixels)
