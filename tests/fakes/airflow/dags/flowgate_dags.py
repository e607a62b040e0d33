"""The DAGs flowgate's Airflow tests run (scripts/lib/airflow.sh points Airflow's dags_folder here).

Each reads its arguments from the run's ``conf`` and returns its result as the XCom
``return_value`` of a named task, which the engine reads back.

- flowgate_hello: ``greet`` returns {"greeting": "hello <name>"}.
- flowgate_fails: ``load`` fails with "no rows for <day>" (no retries).
- flowgate_slow: ``sleep`` sleeps ``seconds`` (600 by default), then returns {"slept": seconds}.
- flowgate_approval: ``approve`` (ApprovalOperator) waits for Approve or Reject, with an
  ``approver`` parameter; ``deploy`` then returns {"service", "approved_by"}. Reject skips it.
- flowgate_form: ``choose`` (HITLOperator, several options, multiple, defaults, params) then
  ``report`` returns what was chosen.
- flowgate_timeout: ``wait`` (HITLOperator) takes its default ``no`` after 3 s unanswered;
  ``after`` returns {"chosen": [...]}.
- flowgate_retry: ``flaky`` fails its first try and succeeds on its second.
- flowgate_paused: paused by the test that checks a paused DAG is named.
- flowgate_run_timeout: ``linger`` sleeps past the run's 4 s ``dagrun_timeout``.
"""

import logging
import time
from datetime import datetime, timedelta

from airflow.providers.standard.operators.hitl import ApprovalOperator, HITLOperator
from airflow.sdk import DAG, Param, task

COMMON = dict(start_date=datetime(2026, 1, 1), schedule=None, catchup=False, tags=["flowgate-test"])


with DAG("flowgate_hello", **COMMON):

    @task(task_id="greet")
    def greet(dag_run=None):
        name = (dag_run.conf or {}).get("name", "world")
        return {"greeting": f"hello {name}"}

    greet()


with DAG("flowgate_fails", **COMMON):

    @task(task_id="prepare")
    def prepare():
        return "ready"

    @task(task_id="load", retries=0)
    def load(_ready, dag_run=None):
        day = (dag_run.conf or {}).get("day", "today")
        # Logged, not printed: a task's stdout reaches Airflow's log through a pipe of its own,
        # whose lines can land before or after the exception's (even flushed), and the
        # conformance suite compares the failures of two runs.
        logging.getLogger("airflow.task").info("loading the rows of %s", day)
        raise ValueError(f"no rows for {day}")

    load(prepare())


with DAG("flowgate_slow", **COMMON):

    @task(task_id="sleep")
    def sleep(dag_run=None):
        seconds = int((dag_run.conf or {}).get("seconds", 600))
        time.sleep(seconds)
        return {"slept": seconds}

    sleep()


with DAG("flowgate_approval", **COMMON):
    approve = ApprovalOperator(
        task_id="approve",
        subject="Deploy {{ dag_run.conf.get('service', 'web') }} to production?",
        body="The release of **{{ dag_run.conf.get('service', 'web') }}** waits for an approval.",
        params={"approver": Param("", type="string", description="Who approves")},
    )

    @task(task_id="deploy")
    def deploy(answer, dag_run=None):
        service = (dag_run.conf or {}).get("service", "web")
        return {"service": service, "approved_by": answer["params_input"].get("approver")}

    deploy(approve.output)


with DAG("flowgate_form", **COMMON):
    choose = HITLOperator(
        task_id="choose",
        subject="Which regions?",
        body="Pick the regions to roll out to.",
        options=["eu", "us", "apac"],
        multiple=True,
        defaults=["eu"],
        params={
            "replicas": Param(2, type="integer", minimum=1, maximum=10, description="Replicas per region"),
            "note": Param("none", type="string"),
        },
    )

    @task(task_id="report")
    def report(answer):
        return {"regions": answer["chosen_options"], "replicas": answer["params_input"].get("replicas")}

    report(choose.output)


with DAG("flowgate_timeout", **COMMON):
    wait = HITLOperator(
        task_id="wait",
        subject="Proceed?",
        options=["yes", "no"],
        defaults=["no"],
        response_timeout=timedelta(seconds=3),
    )

    @task(task_id="after")
    def after(answer):
        return {"chosen": answer["chosen_options"]}

    after(wait.output)


with DAG("flowgate_retry", **COMMON):

    @task(task_id="flaky", retries=1, retry_delay=timedelta(seconds=1))
    def flaky(ti=None):
        if ti.try_number < 2:
            raise RuntimeError("first try fails")
        return {"try": ti.try_number}

    flaky()


# Paused by the test that checks a paused DAG is named (its runs stay queued).
with DAG("flowgate_paused", **COMMON):

    @task(task_id="noop")
    def noop():
        return {}

    noop()


# A run that outlives its dagrun_timeout: the scheduler fails the run and stops its task.
with DAG("flowgate_run_timeout", dagrun_timeout=timedelta(seconds=4), **COMMON):

    @task(task_id="linger")
    def linger():
        time.sleep(120)

    linger()
