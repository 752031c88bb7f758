"""Fleet plans: many training runs on one GPU inventory over months, chosen and scheduled together.

apsi.fleet.tables holds the program's integer data, apsi.fleet.program the CP-SAT program.
"""
