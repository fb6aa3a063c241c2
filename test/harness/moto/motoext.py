"""moto's server with node-drainer's lifecycle-action extension.

It also answers EventBridge's TestEventPattern with moto's own pattern matcher
(moto 5.2.1 answers it with an empty body).

moto 5.2.1 does not implement the Auto Scaling operations CompleteLifecycleAction
and RecordLifecycleActionHeartbeat (HTTP 500, NotImplementedError). This script
adds them to moto.autoscaling.responses.AutoScalingResponse with the semantics of
real AWS: an action must be active (the test harness registers it, as a real Auto
Scaling group would create it when an instance starts terminating or launching),
the group and the hook must exist, and a completed action is gone.

Extra HTTP endpoints, beside moto's own:
  POST /node-drainer/lifecycle-actions  JSON {asg, hook, instanceId, token, transition}
                                        (the instance then waits in Terminating:Wait or
                                        Pending:Wait in its group, until the action completes)
  GET  /node-drainer/lifecycle-calls    every lifecycle call, as JSON
  POST /node-drainer/eks-cluster        JSON {name, endpoint, caData}: the EKS cluster's
                                        endpoint and CA in DescribeCluster (a real API server)
  POST /moto-api/reset                  moto's reset, which also clears the above

Usage: python3 motoext.py --host 127.0.0.1 --port-file FILE
The server binds a free port and writes it to FILE once it listens. It exits
when its standard input is closed, so it does not outlive its parent.
"""

import argparse
import datetime
import json
import os
import sys
import threading

from moto.autoscaling.exceptions import ValidationError
from moto.autoscaling.responses import AutoScalingResponse
from moto.core.responses import EmptyResult
from moto.events.responses import EventsHandler
from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    create_backend_app,
)
from werkzeug.serving import make_server
from werkzeug.wrappers import Request, Response

PARAMS = (
    "AutoScalingGroupName",
    "LifecycleHookName",
    "LifecycleActionToken",
    "InstanceId",
    "LifecycleActionResult",
)
DEFAULT_TRANSITION = "autoscaling:EC2_INSTANCE_TERMINATING"


class Store:
    """Active lifecycle actions and the record of every lifecycle call."""

    def __init__(self):
        self.lock = threading.Lock()
        self.actions = []
        self.calls = []

    def reset(self):
        with self.lock:
            self.actions = []
            self.calls = []

    def register(self, action):
        with self.lock:
            self.actions.append(action)

    def record(self, operation, params, outcome):
        now = datetime.datetime.now(datetime.timezone.utc)
        with self.lock:
            self.calls.append(
                {
                    "time": now.isoformat().replace("+00:00", "Z"),
                    "operation": operation,
                    "params": params,
                    "outcome": outcome,
                }
            )

    def find(self, params, remove):
        """Returns the active action the call names, or raises ValidationError."""
        asg = params.get("AutoScalingGroupName", "")
        hook = params.get("LifecycleHookName", "")
        token = params.get("LifecycleActionToken", "")
        instance = params.get("InstanceId", "")
        with self.lock:
            for i, a in enumerate(self.actions):
                if a["asg"] != asg or a["hook"] != hook:
                    continue
                if token and a["token"] != token:
                    continue
                if instance and a["instanceId"] != instance:
                    continue
                if remove:
                    del self.actions[i]
                return a
        if token:
            raise ValidationError(f"No active Lifecycle Action found with token {token}")
        raise ValidationError(
            f"No active Lifecycle Action found with instance ID {instance}"
        )


STORE = Store()


def _lifecycle_call(response, operation, complete):
    params = {}
    for name in PARAMS:
        value = response._get_param(name)
        if value is not None:
            params[name] = str(value)
    try:
        _validate(response.autoscaling_backend, params, complete)
        action = STORE.find(params, remove=complete)
    except ValidationError as err:
        STORE.record(operation, params, err.message)
        raise
    STORE.record(operation, params, "ok")
    if complete:
        _set_lifecycle_state(params["AutoScalingGroupName"], params.get("InstanceId") or action["instanceId"],
                             _after(action["transition"], params.get("LifecycleActionResult")))
    return EmptyResult()


WAIT_STATES = {
    "autoscaling:EC2_INSTANCE_TERMINATING": "Terminating:Wait",
    "autoscaling:EC2_INSTANCE_LAUNCHING": "Pending:Wait",
}


def _after(transition, result):
    """The lifecycle state an instance moves to when its action completes."""
    if transition == "autoscaling:EC2_INSTANCE_LAUNCHING" and result == "CONTINUE":
        return "InService"
    return "Terminating:Proceed"


def _set_lifecycle_state(asg, instance_id, state):
    """Sets the instance's lifecycle state in moto's group, as Auto Scaling
    would while an action waits (moto keeps every instance InService)."""
    from moto.autoscaling.models import autoscaling_backends
    from moto.core import DEFAULT_ACCOUNT_ID

    backend = autoscaling_backends[DEFAULT_ACCOUNT_ID][REGION]
    group = backend.autoscaling_groups.get(asg)
    if group is None:
        return
    for state_ in group.instance_states:
        if state_.instance.id == instance_id:
            state_.lifecycle_state = state


REGION = os.environ.get("AWS_DEFAULT_REGION", "us-east-1")


def _validate(backend, params, complete):
    asg = params.get("AutoScalingGroupName")
    hook = params.get("LifecycleHookName")
    if not asg or not hook:
        raise ValidationError(
            "AutoScalingGroupName and LifecycleHookName are required"
        )
    if not params.get("LifecycleActionToken") and not params.get("InstanceId"):
        raise ValidationError(
            "Either LifecycleActionToken or InstanceId must be specified"
        )
    if complete and params.get("LifecycleActionResult") not in ("CONTINUE", "ABANDON"):
        raise ValidationError(
            "LifecycleActionResult must be CONTINUE or ABANDON, got "
            f"{params.get('LifecycleActionResult')!r}"
        )
    if asg not in backend.autoscaling_groups:
        raise ValidationError(
            f"AutoScalingGroup name not found - AutoScalingGroup {asg} not found"
        )
    if not backend.describe_lifecycle_hooks(asg, [hook]):
        raise ValidationError(f"No Lifecycle Hook found with name {hook} in group {asg}")


def complete_lifecycle_action(self):
    return _lifecycle_call(self, "CompleteLifecycleAction", complete=True)


def record_lifecycle_action_heartbeat(self):
    return _lifecycle_call(self, "RecordLifecycleActionHeartbeat", complete=False)


def test_event_pattern(self):
    """EventBridge TestEventPattern (moto 5.2.1 answers it with nothing),
    with moto's own matcher, the one its rules use for PutEvents."""
    from moto.events.models import EventPattern

    event = json.loads(self._get_param("Event"))
    pattern = EventPattern.load(self._get_param("EventPattern"))
    return json.dumps({"Result": bool(pattern.matches_event(event))})


EventsHandler.test_event_pattern = test_event_pattern
AutoScalingResponse.complete_lifecycle_action = complete_lifecycle_action
AutoScalingResponse.record_lifecycle_action_heartbeat = record_lifecycle_action_heartbeat


def _json(status, body):
    return Response(json.dumps(body), status=status, mimetype="application/json")


def _register(request):
    try:
        body = json.loads(request.get_data(as_text=True) or "{}")
    except ValueError as err:
        return _json(400, {"error": f"invalid JSON: {err}"})
    action = {
        "asg": body.get("asg", ""),
        "hook": body.get("hook", ""),
        "instanceId": body.get("instanceId", ""),
        "token": body.get("token", ""),
        "transition": body.get("transition") or DEFAULT_TRANSITION,
    }
    missing = [k for k in ("asg", "hook", "instanceId", "token") if not action[k]]
    if missing:
        return _json(400, {"error": "missing fields: " + ", ".join(missing)})
    STORE.register(action)
    _set_lifecycle_state(action["asg"], action["instanceId"], WAIT_STATES.get(action["transition"], "Terminating:Wait"))
    return _json(201, action)


def _eks_cluster(request):
    """Points an EKS cluster of moto at a real API server: DescribeCluster
    then answers its endpoint and CA (moto makes both up)."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.eks.models import eks_backends

    try:
        body = json.loads(request.get_data(as_text=True) or "{}")
    except ValueError as err:
        return _json(400, {"error": f"invalid JSON: {err}"})
    backend = eks_backends[DEFAULT_ACCOUNT_ID][body.get("region") or REGION]
    cluster = backend.clusters.get(body.get("name", ""))
    if cluster is None:
        return _json(404, {"error": f"no cluster {body.get('name')!r}"})
    cluster.endpoint = body.get("endpoint", cluster.endpoint)
    cluster.certificate_authority = {"data": body.get("caData", cluster.certificate_authority["data"])}
    return _json(200, {"name": cluster.name, "endpoint": cluster.endpoint})


class Extension:
    """WSGI middleware: our endpoints first, then moto."""

    def __init__(self, moto_app):
        self.moto_app = moto_app

    def __call__(self, environ, start_response):
        path = environ.get("PATH_INFO", "")
        method = environ.get("REQUEST_METHOD", "")
        if path == "/node-drainer/lifecycle-actions" and method == "POST":
            return _register(Request(environ))(environ, start_response)
        if path == "/node-drainer/eks-cluster" and method == "POST":
            return _eks_cluster(Request(environ))(environ, start_response)
        if path == "/node-drainer/lifecycle-calls" and method == "GET":
            with STORE.lock:
                calls = list(STORE.calls)
            return _json(200, calls)(environ, start_response)
        if path == "/moto-api/reset" and method == "POST":
            STORE.reset()
        return self.moto_app(environ, start_response)


def _exit_when_stdin_closes():
    sys.stdin.buffer.read()
    os._exit(0)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--port-file", required=True)
    args = parser.parse_args()

    app = Extension(DomainDispatcherApplication(create_backend_app))
    server = make_server(args.host, args.port, app, threaded=True)
    os.environ["MOTO_PORT"] = str(server.server_port)
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(server.server_port))
    os.rename(tmp, args.port_file)
    print(f"motoext listening on {args.host}:{server.server_port}", flush=True)
    threading.Thread(target=_exit_when_stdin_closes, daemon=True).start()
    server.serve_forever()


if __name__ == "__main__":
    main()
