"""A DAG file Airflow cannot import, on purpose: the test that starts a run of the DAG it would
define (flowgate_broken) checks that the operator error names this file and its error."""

raise RuntimeError("flowgate_broken is broken on purpose")
