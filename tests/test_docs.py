"""docs/api.md is what the code's docstrings and signatures say (docs/make_api.py writes it)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_api_reference_is_current():
    proc = subprocess.run([sys.executable, str(ROOT / "docs" / "make_api.py"), "--check"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr + " (run: python docs/make_api.py)"
    text = (ROOT / "docs" / "api.md").read_text()
    for name in ("hetrl.train", "hetrl.resume", "hetrl.evaluate", "hetrl.load", "hetrl.Callback", "hetrl.envs.AtariOptions"):
        assert f"## `{name}`" in text
