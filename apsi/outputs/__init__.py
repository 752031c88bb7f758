"""What apsi writes for people and for other programs: text (a plan, a serving plan and their
explanations as the CLI prints them), tables (runs and frontiers as table, CSV, JSON or markdown)
and export (a plan as a launch configuration each framework and engine reads). Rendering only:
nothing here computes a plan."""
