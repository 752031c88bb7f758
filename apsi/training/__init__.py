"""The training plan: frameworks (each framework's rules and memory, the exact walk over their
layouts, its bounds and work budget, the frontier), reference (the reference arithmetic's
CP-SAT program and planning), explain (the binding rule, Why line, runner-up and levers, above
the solving) and assembly (the Plan around a layout, which every path ends in)."""
