"""transformers stays optional: ``import attnlab`` (and the integration module itself) never loads it, and
``register()`` without it names the extra to install. Runs whether or not transformers is installed."""

import subprocess
import sys

# one fresh, isolated interpreter (python -I) for both checks: starting one costs seconds
CODE = """
import sys
import attnlab
assert 'transformers' not in sys.modules, 'import attnlab imported transformers'
import attnlab.integrations.hf as hf
assert 'transformers' not in sys.modules, 'import attnlab.integrations.hf imported transformers'
sys.modules['transformers'] = None  # `import transformers` now fails as if it were not installed
try:
    hf.register()
except ImportError as e:
    print(e)
else:
    print('registered without transformers')
"""


def test_transformers_is_optional():
    r = subprocess.run([sys.executable, "-I", "-c", CODE], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "pip install 'attnlab[hf]'" in r.stdout and "transformers >= 4.57" in r.stdout, r.stdout
