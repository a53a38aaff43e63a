"""The DVC stages (train, evaluate, video, report, collect) and their plumbing:
telemetry, progress, the stage process's lifeline, run names, plugins, launch."""
