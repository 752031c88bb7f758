"""Fleet plans: many training runs on one GPU inventory over months, chosen and scheduled together.

The package is named fleets so that the package attribute apsi.fleet stays the function fleet()
(apsi.fleets.api) once this package is imported, as apsi.api.frontier holds apsi.frontier. Its modules:
spec (the fleet: block of a scenario file: Fleet, Inventory, FleetRun), options (each run's
options from its own frontier), tables (the program's integer data), program (the CP-SAT
program), conflicts (what cannot be done, and what would resolve it), why (what decided each
run's slot), api (fleet()), result (FleetResult), render (text, CSV, JSON, Markdown) and plot (the
Gantt chart).
"""
