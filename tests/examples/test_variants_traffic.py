"""examples/variants_traffic.py: its tables come from attnlab.cost.window, agree with the blockwise IOStats,
and are what docs/variants.md shows; its plot is written; bad arguments are one line and exit 2."""

import importlib.util
import re
from pathlib import Path

import pytest

from attnlab import cost

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "variants_traffic.py"
DOC = ROOT / "docs" / "variants.md"


def _load():
    spec = importlib.util.spec_from_file_location("variants_traffic", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


vt = _load()


def test_closed_forms_agree_with_the_blockwise_counts():
    """The third table: window_forward_io / varlen_forward_io against flash_forward(_varlen)'s IOStats."""
    rows = vt.measured_rows()
    assert len(rows) == 16
    for case, what, want, got in rows:
        assert want == got, (case, what, want, got)
    assert any(what == "block pairs skipped" and want > 0 for _, what, want, _ in rows)  # the window skips


def test_window_rows():
    rows = vt.window_rows()
    assert [r["N"] for r in rows] == [1024 << k for k in range(7)]
    for r in rows:
        if r["N"] <= 4096:  # a window as long as the sequence changes nothing
            assert r["window_kv_bytes"] == r["causal_kv_bytes"] and r["window_pairs"] == r["causal_pairs"]
        assert r["window_kv_bytes"] == cost.window_kv_bytes(seq=r["N"], head_dim=128, block_q=128, block_k=128,
                                                            window=(4095, 0))
    big = rows[-2:]  # 32K -> 64K: causal traffic x4, the window's x2 (up to the first blocks)
    assert abs(big[1]["causal_kv_bytes"] / big[0]["causal_kv_bytes"] - 4) < 0.02
    assert abs(big[1]["window_kv_bytes"] / big[0]["window_kv_bytes"] - 2) < 0.1


def test_packing_rows():
    lengths = [300, 5, 64]
    rows = vt.packing_rows(lengths=lengths, window=16, block=32)
    pv = cost.packed_vs_padded(seqlens_q=lengths, block_q=32, block_k=32, causal=True)
    assert (rows[0]["blocks"], rows[0]["padded_blocks"]) == (pv.blocks, pv.padded_blocks)
    assert rows[0]["padded_blocks"] > rows[0]["blocks"] and rows[1]["blocks"] < rows[0]["blocks"]


def _doc_block(text: str) -> str:
    m = re.search(r"\$ python examples/variants_traffic.py --no-plot\n(.*?)\n```", text, re.S)
    assert m, "the docs page shows the script's output"
    return m.group(1)


def test_docs_show_the_scripts_output(capsys, monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    assert vt.main(["--no-plot"]) == 0
    out = capsys.readouterr().out
    got = [line.rstrip() for line in out.rstrip("\n").splitlines()]
    assert _doc_block(DOC.read_text(encoding="utf-8")).splitlines() == got


def test_docs_numbers_are_the_scripts():
    doc = " ".join(DOC.read_text(encoding="utf-8").split())  # one line: sentences wrap anywhere
    w = vt.window_rows()[-1]
    p = vt.packing_rows()[0]
    for phrase in (
        f"At N = 64K the window reads {w['saving']:.1f}× fewer K/V bytes",
        f"({vt._mib(w['window_kv_bytes'])} against {vt._mib(w['causal_kv_bytes'])} per (batch, K/V head))",
        f"It computes {w['window_fraction']:.1%} of the N² scores",
        f"is {cost.decode_window_keys(seq=131072, window=(4095, 0)):,}: a model with a 4K window",
        f"padding visits {p['ratio']:.2f}× as many block pairs",
        f"reads {vt._mib(p['padded_kv_bytes'])} of K/V against {vt._mib(p['kv_bytes'])}",
        f"Only {p['pairs'] / p['padded_pairs']:.1%} of the pairs",
    ):
        assert phrase in doc, phrase
    assert not re.search(r"(^|[\s`(])/[A-Za-z]", doc) and "../" not in doc  # points inside the repository only


def test_main_writes_its_plot(tmp_path, capsys):
    out = tmp_path / "plots"
    assert vt.main(["--out", str(out), "--window", "64", "--lengths", "300,5,64"]) == 0
    png = out / vt.PLOT_NAME
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = capsys.readouterr().out
    assert "window of 64 keys" in text and " NO " not in text


@pytest.mark.parametrize("argv,match", [
    (["--window", "0"], "--window"),
    (["--lengths", "3,x"], "--lengths"),
    (["--block", "-4"], "--block"),
])
def test_bad_arguments_are_one_line(argv, match, capsys):
    with pytest.raises(SystemExit) as e:
        vt.main(argv + ["--no-plot"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and match in err


def test_out_that_is_a_file_is_refused(tmp_path, capsys):
    f = tmp_path / "a-file"
    f.write_text("mine")
    assert vt.main(["--out", str(f)]) == 2
    assert f.read_text() == "mine"
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--out" in err
