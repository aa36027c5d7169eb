"""The package as a user meets it: a light import, every public name resolvable, the CLI frame."""

import subprocess
import sys

import pytest

import attnlab
from attnlab.cli import main


def test_import_is_light():
    code = "import attnlab, sys; print(sorted(m for m in sys.modules if m.split('.')[0] in ('triton', 'matplotlib')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("name", sorted(attnlab._EXPORTS))
def test_public_names_resolve(name):
    assert getattr(attnlab, name) is not None


def test_unknown_attribute():
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        attnlab.nope  # noqa: B018


def test_cli_help_and_info(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    assert "tour" in capsys.readouterr().out
    assert main(["info"]) == 0
    assert "torch" in capsys.readouterr().out


def test_cli_no_command_is_usage_error(capsys):
    assert main([]) == 2


def test_cli_bad_input_is_one_line(capsys):
    with pytest.raises(SystemExit) as e:  # argparse refuses the value before any work: exit 2
        main(["bench", "--seq", "0"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--seq: must be a positive integer, got '0'" in err


def test_console_script_runs():
    r = subprocess.run([sys.executable, "-m", "attnlab", "info"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
