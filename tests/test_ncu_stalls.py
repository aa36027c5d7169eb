"""benchmarks/ncu_stalls.py: an ncu source-page CSV (SASS with sampled stall reasons) reduced to a ledger."""

import json
import subprocess
import sys

from tests.helpers import ROOT, load_script

CSV = '''"Address","Source","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)","stall_long_sb","stall_barrier","stall_wait"
"0x100","HGMMA.64x64x16.F32.BF16 R24, gdesc[UR4], RZ","30","28","0","0","30"
"0x110","@P0 SYNCS.PHASECHK.TRANS64 P1, [UR8], R3","50","50","5","0","45"
"0x120","STS.128 [R5], R8","15","10","0","0","15"
"0x130","BAR.SYNC.DEFER_BLOCKING 0x1, 0x80","5","5","0","5","0"
"0x140","IMAD R1, R2, R3, R4","0","0","0","0","0"
'''


def test_ledger_counts_reasons_opcodes_and_instructions(tmp_path):
    mod = load_script("benchmarks/ncu_stalls.py")
    f = tmp_path / "src.csv"
    f.write_text("==PROF== a note ncu prints first\n" + CSV)
    led = mod.ledger(*mod.read_source_csv(f))
    assert led["total"] == 100
    assert led["by_reason"] == {"stall_wait": 90, "stall_long_sb": 5, "stall_barrier": 5}
    assert led["by_opcode"] == {"SYNCS": 50, "HGMMA": 30, "STS": 15, "BAR": 5}  # the predicate skipped
    assert [d["address"] for d in led["instructions"]] == ["0x110", "0x100", "0x120", "0x130"]


def test_cli_prints_the_ledger_and_refuses_bad_input(tmp_path):
    f = tmp_path / "src.csv"
    f.write_text(CSV)
    script = str(ROOT / "benchmarks" / "ncu_stalls.py")
    res = subprocess.run([sys.executable, script, str(f), "--cover", "0.5"], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert "| SYNCS | 50 | 50.0% |" in res.stdout
    assert "0x110" in res.stdout and "0x120" not in res.stdout.split("| address |")[1]  # 50 % covered by one row
    bad = tmp_path / "bad.csv"
    bad.write_text('"Address","Source","Other"\n"0x1","NOP","3"\n')
    res = subprocess.run([sys.executable, script, str(bad)], capture_output=True, text=True)
    assert res.returncode == 2 and "Warp Stall Sampling" in res.stderr
    out = tmp_path / "led.json"
    out.write_text("mine")
    res = subprocess.run([sys.executable, script, str(f), "--json", str(out)], capture_output=True, text=True)
    assert res.returncode == 2 and out.read_text() == "mine"


def test_cli_read_in_part_writes_the_json_and_no_traceback(tmp_path):
    """Piped into a reader that stops early (``| head``, as the device script reads it): the JSON ledger is written
    anyway and the script ends without a traceback."""
    f = tmp_path / "src.csv"
    f.write_text(CSV * 1 + "".join(f'"0x{0x200 + i:x}","NOP","1","1","0","1","0"\n' for i in range(20000)))
    out = tmp_path / "led.json"
    script = str(ROOT / "benchmarks" / "ncu_stalls.py")
    proc = subprocess.Popen([sys.executable, script, str(f), "--json", str(out), "--cover", "1", "--top", "20000"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().startswith("stall samples:")
    proc.stdout.close()  # (the reader goes away with most of the ledger unread)
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 0 and "Traceback" not in err, err
    assert json.loads(out.read_text())["total"] == 100 + 20000
