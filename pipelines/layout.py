"""Where each stage reads and writes, relative to the project root (mirrors `dvc.yaml`).

Training and evaluation run once per seed (a DVC matrix): their files live under
`outputs/seeds/<seed>/` and `metrics/seeds/<seed>/`, for the layout's `seed`. The video, the
run report and the search are per experiment.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

# Where stages run with another params file than params.yaml write (`Layout.for_params`).
EXPERIMENTS = "experiments"


@dataclass(frozen=True)
class Layout:
    root: Path = Path(".")
    seed: int = 0
    # A study run from a params file other than the project's: its reports go under its own
    # name, so it never touches the default study's (which DVC tracks).
    search_name: str = ""

    def for_seed(self, seed: int) -> Layout:
        return dataclasses.replace(self, seed=seed)

    def for_params(self, params_path: Path) -> Layout:
        """The layout of the stages run with `--params params_path`. The project's
        params.yaml writes the paths dvc.yaml names; any other file writes the same tree
        under `experiments/<its path from the project root, without suffix>/` (a file outside
        the project: `experiments/<stem>-<hash of its path>/`), so trying another experiment
        file never overwrites the main experiment's checkpoints and metrics, which DVC tracks.
        """
        path = Path(params_path).resolve()
        root = self.root.resolve()
        if path == root / "params.yaml":
            return self
        if path.is_relative_to(root):
            name = path.relative_to(root).with_suffix("")
        else:
            name = Path(f"{path.stem}-{hashlib.sha256(str(path).encode()).hexdigest()[:8]}")
        return dataclasses.replace(self, root=self.root / EXPERIMENTS / name)

    def for_search_params(self, params_path: Path, study_name: str) -> Layout:
        """The layout of a search run with `--params params_path`: the project's params.yaml
        keeps the plain paths; any other file writes `reports/search-<study_name>/`,
        `metrics/search-<study_name>.json` and `outputs/search-<study_name>/html/`, beside
        (not inside) the default study's DVC outputs. The journal stays shared (one file
        holds many studies, by name)."""
        if Path(params_path).resolve() == (self.root / "params.yaml").resolve():
            return self
        return self.for_study(study_name)

    def for_study(self, study_name: str) -> Layout:
        """The layout of the study named `study_name` run from its own params file (its
        name made safe as a directory name)."""
        return dataclasses.replace(self, search_name=re.sub(r"[^\w.-]+", "-", study_name))

    @property
    def seed_metrics(self) -> Path:
        """Every seed's metrics directory lives here (the report stage depends on it)."""
        return self.root / "metrics" / "seeds"

    @property
    def plugins(self) -> Path:
        """The source hashes of an algorithm of your own (`pipelines.stages.plugins`); train
        depends on it. In git, beside the metrics it explains."""
        return self.root / "metrics" / "plugins.json"

    @property
    def checkpoints(self) -> Path:
        return self.root / "outputs" / "seeds" / str(self.seed) / "checkpoints"

    @property
    def final_checkpoint(self) -> Path:
        return self.checkpoints / "final.pt"

    @property
    def best_checkpoint(self) -> Path:
        """The policy of the best evaluation during training
        (`pipelines.stages.train.BestPolicy`)."""
        return self.checkpoints / "best.pt"

    def checkpoint(self, which: str) -> Path:
        """`final` or `best` (`evaluation.checkpoint`)."""
        return self.best_checkpoint if which == "best" else self.final_checkpoint

    @property
    def resume_checkpoint(self) -> Path:
        """Progress of an unfinished training run; removed when the run completes."""
        return self.checkpoints / "resume.pt"

    @property
    def train_metrics(self) -> Path:
        return self.seed_metrics / str(self.seed) / "train.json"

    @property
    def curve(self) -> Path:
        return self.seed_metrics / str(self.seed) / "curve.csv"

    @property
    def provenance(self) -> Path:
        """Where the run was trained: CPU, kernels, packages (`rlcore.runtime.provenance`)."""
        return self.seed_metrics / str(self.seed) / "provenance.json"

    @property
    def live_metrics(self) -> Path:
        """DVCLive's directory: every iteration's metrics (`pipelines.stages.telemetry`)."""
        return self.seed_metrics / str(self.seed) / "live"

    @property
    def live_partial(self) -> Path:
        """DVCLive's files while the run trains: `live_metrics` is replaced by them with the
        stage's other outputs, so a failed run leaves the published ones as they were."""
        return self.root / "outputs" / "seeds" / str(self.seed) / "live.partial"

    @property
    def train_lock(self) -> Path:
        """Held by the seed's running trainer (`pipelines.stages.lifeline.run_lock`)."""
        return self.root / "outputs" / "seeds" / str(self.seed) / "train.lock"

    @property
    def tensorboard_runs(self) -> Path:
        """Every training run's TensorBoard events (not tracked by DVC)."""
        return self.root / "outputs" / "tensorboard"

    def tensorboard(self, run: str) -> Path:
        """TensorBoard event files of `run` (`pipelines.stages.telemetry.tensorboard_run`) for this
        seed."""
        return self.tensorboard_runs / run / f"seed_{self.seed}"

    @property
    def eval_metrics(self) -> Path:
        return self.seed_metrics / str(self.seed) / "eval.json"

    @property
    def summary_metrics(self) -> Path:
        """Means and standard deviations over the seeds (the report stage)."""
        return self.root / "metrics" / "summary.json"

    @property
    def collect_metrics(self) -> Path:
        return self.root / "metrics" / "collect.json"

    @property
    def video_metrics(self) -> Path:
        return self.root / "metrics" / "video.json"

    @property
    def video(self) -> Path:
        return self.root / "outputs" / "video" / "episodes.mp4"

    @property
    def report_dir(self) -> Path:
        return self.root / "reports" / "run"

    @property
    def report(self) -> Path:
        return self.report_dir / "report.md"

    @property
    def curve_png(self) -> Path:
        return self.report_dir / "curve.png"

    @property
    def compare_report(self) -> Path:
        """`python -m pipelines compare`: Markdown page; the HTML page and figures beside it."""
        return self.root / "reports" / "compare.md"

    @property
    def compare_html(self) -> Path:
        return self.root / "reports" / "compare.html"

    @property
    def compare_dir(self) -> Path:
        return self.root / "reports" / "compare"

    @property
    def search_journal(self) -> Path:
        """The default Optuna storage: a journal file DVC keeps as a persistent output."""
        return self.root / "outputs" / "search" / "journal.log"

    @property
    def _search_dir(self) -> str:
        return f"search-{self.search_name}" if self.search_name else "search"

    @property
    def search_reports(self) -> Path:
        return self.root / "reports" / self._search_dir

    @property
    def search_metrics(self) -> Path:
        return self.root / "metrics" / f"{self._search_dir}.json"

    @property
    def search_trials(self) -> Path:
        """Checkpoints of running trials, `<number>.pt`: a trial stopped by a Ctrl-C or a
        killed worker goes on from its last evaluation when the study resumes (not in git).
        Use it on `for_study(name)`: trial numbers are per study, and a journal holds many."""
        return self.root / "outputs" / self._search_dir / "trials"

    @property
    def search_html(self) -> Path:
        """Self-contained interactive plots (several MB each: cached by DVC, not in git)."""
        return self.root / "outputs" / self._search_dir / "html"
