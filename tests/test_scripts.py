"""The Python API from a plain script, as a user writes one: no ``if __name__ == "__main__":``
guard, an empty profile cache (so the profiler starts its helper processes), two runs in a row,
one with actor processes. No child process may run the script again."""

import os
import subprocess
import sys


def test_an_unguarded_script_trains_twice_on_an_empty_cache(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(
        "import hetrl\n"
        f"first = hetrl.train('dqn', 'CartPole-v1', steps=1500, progress=False, run_dir={str(tmp_path / 'a')!r})\n"
        "print('first', first.env_steps, flush=True)\n"
        f"second = hetrl.train('dqn', 'CartPole-v1', steps=1500, progress=False, lr=2e-3, executor='local', actors=1,\n"
        f"                     run_dir={str(tmp_path / 'b')!r})\n"
        "print('second', second.env_steps, flush=True)\n"
    )
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [line for line in proc.stdout.splitlines() if line.split()[0] in ("first", "second")]
    assert [line.split()[0] for line in lines] == ["first", "second"], proc.stdout  # each once: no child re-ran the script
    assert "bootstrapping phase" not in proc.stderr
    assert (tmp_path / "cache" / "hetrl" / "profiles").exists()  # the profiler really ran (and started its helpers)
