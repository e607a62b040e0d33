"""The DAG examples/airflow/tools.yaml runs: build, a person approves, deploy.

Copy it into your Airflow's DAGs folder. `build` and `deploy` stand in for real work; the
approval is Airflow's own ApprovalOperator (standard provider, Airflow 3.1+), which flowgate
shows the MCP client as a question: accepting approves with the `approver` field, declining
rejects (the deploy is skipped and the call fails saying so).
"""

from datetime import datetime

from airflow.providers.standard.operators.hitl import ApprovalOperator
from airflow.sdk import DAG, Param, task

with DAG(
    "release_approval",
    start_date=datetime(2026, 1, 1),
    schedule=None,
    catchup=False,
    params={"service": Param("web", type="string"), "version": Param("0.0.0", type="string")},
    tags=["flowgate"],
):

    @task(task_id="build")
    def build(params=None):
        print(f"building {params['service']} {params['version']}")
        return f"{params['service']}:{params['version']}"

    approve = ApprovalOperator(
        task_id="approve",
        subject="Release {{ params.service }} {{ params.version }} to production?",
        body="The build of **{{ params.service }} {{ params.version }}** passed.",
        # A step's params are checked when the step starts, so each needs a valid default.
        params={"approver": Param("", type="string", description="Who approves the release")},
    )

    @task(task_id="deploy")
    def deploy(image, answer, params=None):
        return {
            "service": params["service"],
            "version": params["version"],
            "image": image,
            "approved_by": answer["params_input"]["approver"],
        }

    image = build()
    image >> approve
    deploy(image, approve.output)
