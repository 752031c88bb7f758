"""The reference arithmetic (`--framework reference`): problem (the program's plain numbers),
program (the CP-SAT model that decides it) and planning (from a question to its program and back
to a Plan)."""
