"""The public API's questions, composed from the wings below them: plan (a training plan, or one
layout evaluated, and the reference's tables), frontier (the GPUs/days frontier), largest (the
largest model that trains on N GPUs in D days) and scenarios (a file of runs, each a plan or a
serving plan). apsi/__init__.py exports their names."""
