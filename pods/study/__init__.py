"""The study side: run directories become tables, figures and verdicts (docs/architecture.md, "Study").

It reads run files and resolves run configs; it never imports a rollout or update engine.
"""
