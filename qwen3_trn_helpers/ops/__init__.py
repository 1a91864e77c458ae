"""The cluster-tools wing: what a team needs beyond the course. The layout planner
(``planner/``), the trn2 smoke ladder (``smoke/``), Slurm and Kubernetes job files
(``jobs/``), the fabric check, the full-size dry run, ``data prepare``, the offline
wheelhouse and setup's installer choice.

The course core (everything outside ``ops/``) never imports this wing
(tests/core/project/test_architecture.py holds it); the faces above both may: the CLI,
the lessons (notebook 05 draws the planner's answers) and the package face
(``dry_run``, ``slurm_script``, ``pytorchjob_manifest``).
"""
