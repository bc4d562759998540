"""Weights & Biases as a third metrics sink, beside metrics.csv and TensorBoard (the ``wandb`` extra).

A run that sets ``wandb_project`` starts a W&B run named after its run directory, with the run's
config, its local files under ``RUN/wandb/``, and logs every metrics row there under the same
grouped tags as TensorBoard (``rollout/return_mean``, ``train/actor_loss``, ...) at step =
env steps. The W&B run's id is kept in ``RUN/wandb/hetrl-run-id``, so a resumed run goes on
logging into the same W&B run. ``wandb_mode`` (online, offline, disabled) is passed on; left
unset, wandb reads ``WANDB_MODE`` (online when that is unset too).

wandb is imported only here and only when a run asks for it; :func:`require_wandb` is called
before anything of the run is written, so a missing extra stops the run in one line.
"""

from __future__ import annotations

import math
import uuid
from pathlib import Path
from typing import Any

from hetrl.errors import HetrlError
from hetrl.files import ensure_dir, write_text

ID_FILE = "hetrl-run-id"  # in RUN/wandb/, the directory wandb.init(dir=RUN) makes


def require_wandb() -> Any:
    """The wandb module, or a HetrlError naming the extra that installs it."""
    try:
        import wandb
    except ImportError:
        raise HetrlError("wandb_project is set but wandb is not installed: pip install 'hetrl[wandb]' "
                         "(or unset wandb_project)") from None
    return wandb


class WandbSink:
    """One W&B run, fed the rows MetricsWriter writes."""

    def __init__(self, project: str, config: dict[str, Any], run_dir: Path, entity: str | None = None,
                 mode: str | None = None, resumed: bool = False) -> None:
        from hetrl.run.metrics import tensorboard_tag

        wandb = require_wandb()
        self._tag = tensorboard_tag
        id_file = ensure_dir(Path(run_dir) / "wandb") / ID_FILE
        run_id = id_file.read_text().strip() if id_file.exists() else ""
        if not run_id:
            run_id = uuid.uuid4().hex[:12]
            write_text(id_file, run_id + "\n")
        try:
            self.run = wandb.init(project=project, entity=entity, mode=mode, config=config, dir=str(run_dir),
                                  name=Path(run_dir).name, id=run_id, resume="allow" if resumed else None)
        except Exception as exc:  # wandb's own errors (no login, no network): said in one line
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise HetrlError(f"Weights & Biases did not start ({first}); run `wandb login`, or set wandb_mode=offline "
                             f"(`wandb sync` uploads it later) or unset wandb_project") from exc
        self._closed = False

    def write(self, row: dict[str, Any]) -> None:
        values = {self._tag(k): v for k, v in row.items()
                  if k != "env_steps" and isinstance(v, (int, float)) and not math.isnan(v)}
        self.run.log(values, step=int(row["env_steps"]))

    def close(self, failed: bool = False) -> None:
        if not self._closed:
            self._closed = True
            self.run.finish(exit_code=1 if failed else 0)
