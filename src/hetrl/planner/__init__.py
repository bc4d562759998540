"""The planner: a model of each executor's throughput and energy from a measured profile
(``model``: inline, ``model_local``: actor processes), the search over placements (``search``),
the plan file (``plan_file``), its tables (``tables``), the fixed rule (``rule``) and the plan a
run uses with this machine's cached profile (``choice``). Import the modules themselves: the
package imports none of them, so the profiler can use the fixed rule without the model.
"""
