"""Every ``attnlab`` command as a user runs it: a fresh ``python -I`` process, stdout piped.

--version and each command's --help; each command with small arguments (no number cut in a table);
bad input: one line on stderr, exit 2, and nothing a user made is overwritten.
"""

import json
import re

import pytest

import attnlab
from attnlab.cli import build_parser

COMMANDS = build_parser().command_names


def test_version(run_cli):
    r = run_cli("--version")
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"attnlab {attnlab.__version__}\n"


def test_help_of_every_command(run_cli):
    assert {"tour", "demo", "train", "estimate", "bench", "info"} <= set(COMMANDS)
    r = run_cli("--help")
    assert r.returncode == 0, r.stderr
    assert "--version" in r.stdout
    for name in COMMANDS:
        assert name in r.stdout
        sub = run_cli(name, "--help")
        assert sub.returncode == 0, (name, sub.stderr)
        assert sub.stdout.startswith(f"usage: attnlab {name}"), (name, sub.stdout[:200])


def test_every_option_of_every_command_says_what_it_does():
    import argparse

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    bare = [(name, a.option_strings or a.dest) for name, p in sub.choices.items() for a in p._actions
            if not isinstance(a, argparse._HelpAction) and not (a.help or "").strip()]
    assert bare == [], f"options without a help text: {bare}"


def test_no_command_is_one_line(run_cli, one_error_line):
    line = one_error_line(run_cli(), "attnlab")
    assert all(name in line for name in COMMANDS)


@pytest.mark.parametrize("args", [("info",), ("estimate", "--seq", "1000", "--heads", "4"), ("demo", "2")])
def test_command_output_piped_keeps_every_number(run_cli, cut_numbers, tmp_path, args):
    r = run_cli(*args)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "│" in r.stdout or "┃" in r.stdout, "expected at least one table"
    assert cut_numbers(r.stdout) == []
    if args[0] == "demo":  # the plot lands in the default folder, named demoNN_<what>.png
        assert r.stderr == ""
        names = [p.name for p in (tmp_path / "attnlab-out").iterdir()]
        assert names and all(re.fullmatch(r"demo02_[a-z0-9_]+\.png", n) for n in names), names
    if args[0] == "estimate":
        assert "1,000" in r.stdout  # the shape as given, printed whole


@pytest.mark.skipif("simulate" not in COMMANDS, reason="the simulator's command is not in this installation")
def test_simulate_small(run_cli, cut_numbers, tmp_path):
    r = run_cli("simulate", "--seq", "32", "--head-dim", "8", "--block", "16", "--tile", "8",
                "--json", str(tmp_path / "sim.json"))
    assert r.returncode == 0, r.stderr[-3000:]
    assert cut_numbers(r.stdout) == []
    assert json.loads((tmp_path / "sim.json").read_text())


def test_bench_small(run_cli, cut_numbers):
    r = run_cli("bench", "--seq", "32", "--heads", "1", "--head-dim", "8", "--device", "cpu", "--dtype", "float32")
    assert r.returncode == 0, r.stderr[-3000:]
    assert cut_numbers(r.stdout) == []


def test_bench_json_follows_the_output_rule(run_cli, one_error_line, tmp_path):
    small = ("bench", "--seq", "16", "--heads", "1", "--head-dim", "8", "--device", "cpu", "--dtype", "float32")
    r = run_cli(*small, "--json", "-")
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout)  # only the JSON on stdout; the table went to stderr
    assert [row["N"] for row in got["rows"]] == [16, 16] and {row["provider"] for row in got["rows"]} == {"attnlab", "sdpa"}
    assert all(row["ms"] > 0 for row in got["rows"])
    mine = tmp_path / "mine.json"
    mine.write_text("my notes\n")
    line = one_error_line(run_cli(*small, "--json", "mine.json"), "attnlab bench")
    assert "--json" in line and "--force" in line
    assert mine.read_text() == "my notes\n"
    r = run_cli(*small, "--json", "new/dir/b.json")
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads((tmp_path / "new/dir/b.json").read_text())["rows"][0]["N"] == 16


def test_info_json_is_the_table_and_follows_the_output_rule(run_cli, one_error_line, tmp_path):
    r = run_cli("info", "--json", "-")
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout)  # only the JSON on stdout; the table went to stderr
    assert got["attnlab"] == attnlab.__version__ and got["kernels_cpu"] and "kernels_cpu" in r.stderr
    for key, value in got.items():
        assert key in r.stderr and str(value)[:20] in r.stderr, key
    mine = tmp_path / "mine.json"
    mine.write_text("my notes\n")
    line = one_error_line(run_cli("info", "--json", "mine.json"), "attnlab info")
    assert "--json" in line and "--force" in line
    assert mine.read_text() == "my notes\n"
    assert run_cli("info", "--json", "mine.json", "--force").returncode == 0
    assert json.loads(mine.read_text())["attnlab"] == attnlab.__version__


def test_bench_rounds_time_the_providers_in_turns(run_cli):
    r = run_cli("bench", "--seq", "16", "--heads", "1", "--head-dim", "8", "--device", "cpu", "--dtype", "float32",
                "--rounds", "3", "--json", "-")
    assert r.returncode == 0, r.stderr[-3000:]
    rows = json.loads(r.stdout)["rows"]
    assert {row["provider"] for row in rows} == {"attnlab", "sdpa"}
    for row in rows:  # each row the median of its three rounds
        assert len(row["ms_rounds"]) == 3 and row["ms"] == sorted(row["ms_rounds"])[1]


def test_train_tiny(run_cli, cli_env, tmp_path):
    r = run_cli("train", "--steps", "3", "--attempts", "1", "--seed", "1")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "test accuracy" in r.stdout
    assert list((tmp_path / "cache").glob("*.pt")), "the model was not written into ATTNLAB_CACHE"


# -- output files: one rule for --json, --plot and --out ----------------------------------------------


def test_json_and_plot_create_missing_folders(run_cli, tmp_path):
    r = run_cli("estimate", "--seq", "512", "--json", "a/b/est.json", "--plot", "c/d/roof.png")
    assert r.returncode == 0, r.stderr
    got = json.loads((tmp_path / "a/b/est.json").read_text())
    assert got["shape"]["seq"] == 512
    assert (tmp_path / "c/d/roof.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_json_dash_is_stdout_alone(run_cli):
    r = run_cli("estimate", "--seq", "512", "--json", "-")
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)  # stdout holds the JSON and nothing else; the tables went to stderr
    assert got["shape"]["seq"] == 512 and got["shape"]["head_dim"] == 128
    assert "forward" in r.stderr


def test_existing_file_is_kept_unless_force(run_cli, one_error_line, tmp_path):
    mine = tmp_path / "mine.json"
    mine.write_text("my notes\n")
    for option in ("--json", "--plot"):
        line = one_error_line(run_cli("estimate", option, "mine.json"), "attnlab estimate")
        assert option in line and "--force" in line and "exists" in line
        assert mine.read_text() == "my notes\n"
    r = run_cli("estimate", "--seq", "256", "--json", "mine.json", "--force")
    assert r.returncode == 0, r.stderr
    assert json.loads(mine.read_text())["shape"]["seq"] == 256


@pytest.mark.parametrize("args, words", [
    (("estimate", "--json", "{dir}"), ("--json", "folder")),
    (("estimate", "--json", "{file}/x.json"), ("--json", "is a file")),
    (("estimate", "--plot", "{dir}"), ("--plot", "folder")),
    (("demo", "2", "--out", "{file}"), ("--out", "not a folder")),
    (("demo", "2", "--out", "{file}/sub"), ("--out", "cannot create")),
    (("tour", "--out", "{file}"), ("--out", "not a folder")),
    (("tour", "--html", "{file}"), ("--html", "--force")),
    (("tour", "--html", "{dir}"), ("--html", "folder")),
    (("demo", "7"), ("argument N", "7")),
    (("demo", "two"), ("argument N", "two")),
    (("estimate", "--seq", "0"), ("--seq", "'0'")),
    (("estimate", "--heads", "many"), ("--heads", "many")),
    (("estimate", "--block-k", "-3"), ("--block-k", "-3")),
    (("estimate", "--gpu", "Z80"), ("Z80",)),
    (("bench", "--seq", "0"), ("--seq", "'0'")),
    (("bench", "--heads", "-2"), ("--heads", "'-2'")),
    (("bench", "--rounds", "0"), ("--rounds", "'0'")),
    (("nope",), ("nope",)),
])
def test_bad_input_is_one_line(run_cli, one_error_line, tmp_path, args, words):
    (tmp_path / "adir").mkdir()
    (tmp_path / "afile").write_text("mine\n")
    args = [a.format(dir=tmp_path / "adir", file=tmp_path / "afile") for a in args]
    prog = "attnlab" if args[0] == "nope" else f"attnlab {args[0]}"
    line = one_error_line(run_cli(*args), prog)
    for w in words:
        assert w in line, (w, line)
    assert (tmp_path / "afile").read_text() == "mine\n"
    assert not (tmp_path / "attnlab-out").exists(), "a refused command must not start its work"


def test_unwritable_place_is_one_line(run_cli, one_error_line):
    # /proc accepts no new folders, even for root
    line = one_error_line(run_cli("demo", "2", "--out", "/proc/attnlab-test"), "attnlab demo")
    assert "--out /proc/attnlab-test" in line
    line = one_error_line(run_cli("estimate", "--json", "/proc/attnlab-test/x.json"), "attnlab estimate")
    assert "--json" in line
