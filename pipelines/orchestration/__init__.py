"""Prefect: flows that run the stages through DVC, serving and deploying
them, artifacts, and the way back to the committed experiment."""
