"""Where each stage reads and writes, relative to the project root (mirrors `dvc.yaml`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Layout:
    root: Path = Path(".")

    @property
    def checkpoints(self) -> Path:
        return self.root / "outputs" / "checkpoints"

    @property
    def final_checkpoint(self) -> Path:
        return self.checkpoints / "final.pt"

    @property
    def resume_checkpoint(self) -> Path:
        """Progress of an unfinished training run; removed when the run completes."""
        return self.checkpoints / "resume.pt"

    @property
    def train_metrics(self) -> Path:
        return self.root / "metrics" / "train.json"

    @property
    def curve(self) -> Path:
        return self.root / "metrics" / "curve.csv"

    @property
    def eval_metrics(self) -> Path:
        return self.root / "metrics" / "eval.json"

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
    def search_journal(self) -> Path:
        """The default Optuna storage: a journal file DVC keeps as a persistent output."""
        return self.root / "outputs" / "search" / "journal.log"

    @property
    def search_reports(self) -> Path:
        return self.root / "reports" / "search"

    @property
    def search_metrics(self) -> Path:
        return self.root / "metrics" / "search.json"

    @property
    def search_html(self) -> Path:
        """Self-contained interactive plots (several MB each: cached by DVC, not in git)."""
        return self.root / "outputs" / "search" / "html"
