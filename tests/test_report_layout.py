"""`edgetune report` read on a 1024-pixel screen and a phone (issue 31 item 14): long workload
headings wrap, the plot titles fit their images, the toolchain shows as compilers and versions,
workloads name the model layers they serve."""
from __future__ import annotations

import re
import shutil
import subprocess

import matplotlib
import numpy as np
import pytest

import edgetune.report as report
from edgetune.codegen import get_kernel
from edgetune.session import TuneRequest, tune, workload_of
from edgetune.targets import get_target
from edgetune.tuner import TuningDatabase

from model_files import fc_model, write

matplotlib.use("Agg")


@pytest.fixture(scope="module")
def conv_report(tmp_path_factory):
    """A report of one model's convolution (twelve shape keys) tuned on the host."""
    tmp = tmp_path_factory.mktemp("report")
    model = write(tmp, "fc.tflite", fc_model(np.random.default_rng(31), (1, 16), 8))
    kernel = get_kernel("conv2d_s8")
    shape = kernel.parse_shape("h=1,w=1,cin=16,cout=8,kh=1,kw=1,stride=1,pad=0")
    db = TuningDatabase(tmp / "r.db")
    tune(TuneRequest(kernel, get_target("host"), shape, "random", 3, 1, 0), db)
    report.write_report(db, tmp / "out", models=(model,))
    return tmp / "out", db


def test_a_long_title_fits_inside_its_plot():
    title = report.workload_title(*_long_workload())
    for make in (report.convergence_figure, report.pareto_figure):
        fig = make([], "instructions", title)
        fig.canvas.draw()
        box, frame = fig._suptitle.get_window_extent(), fig.bbox
        assert frame.x0 <= box.x0 and box.x1 <= frame.x1, (make.__name__, box, frame)


def _long_workload():
    kernel, target = get_kernel("conv2d_s8"), get_target("cortex-m55")
    shape = kernel.parse_shape("h=160,w=160,cin=128,cout=128,kh=3,kw=3,stride=2,pad=same")
    return workload_of(kernel, target, shape), "instructions"


def test_headings_break_between_shape_keys_and_the_page_fits_a_phone(conv_report):
    out, _ = conv_report
    page = (out / "index.html").read_text()
    assert '<meta name="viewport" content="width=device-width, initial-scale=1">' in page
    for heading in re.findall(r"<h2>(.*?)</h2>", page):
        assert max(map(len, heading.split())) <= 30, heading  # no "word" wider than a phone
    outside = re.sub(r"<div class=scroll>.*?</div>", "", page, flags=re.S)
    assert re.findall(r"<table class=\"?(\w+)", outside) == ["summary"]  # wide tables scroll on their own


def test_the_toolchain_is_named_by_compiler_and_version_and_workloads_name_their_layers(conv_report):
    out, _ = conv_report
    page = (out / "index.html").read_text()
    toolchain = re.search(r"<th>toolchain</th><td>(.*?)</td>", page).group(1)
    assert re.match(r"(clang|gcc): .*(clang|gcc).*version|(clang|gcc): .*\d+\.\d+", toolchain), toolchain
    assert "(fingerprint " in toolchain
    assert "<p class=serves>Serves fc.tflite layer 0</p>" in page


@pytest.mark.skipif(shutil.which("chromium") is None, reason="needs headless Chromium")
@pytest.mark.parametrize("width", [1024, 500])  # 500: headless Chromium's narrowest window, a phone's width
def test_the_page_scrolls_no_wider_than_the_window_in_chromium(conv_report, width):
    out, _ = conv_report
    probe = out / "probe.html"
    probe.write_text((out / "index.html").read_text().replace(
        "</body>", "<script>document.title = 'W=' + document.documentElement.scrollWidth + ' of ' + "
                   "document.documentElement.clientWidth;</script></body>"))
    dom = subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", f"--window-size={width},900",
                          "--dump-dom", probe.as_uri()], capture_output=True, text=True, timeout=120).stdout
    scroll, client = map(int, re.search(r"<title>W=(\d+) of (\d+)", dom).groups())
    assert scroll <= client, (scroll, client)
