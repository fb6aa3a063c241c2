"""moto's server with node-drainer's lifecycle-action extension.

It also answers EventBridge's TestEventPattern with moto's own pattern matcher
(moto 5.2.1 answers it with an empty body).

moto 5.2.1 does not implement the Auto Scaling operations CompleteLifecycleAction
and RecordLifecycleActionHeartbeat (HTTP 500, NotImplementedError). This script
adds them to moto.autoscaling.responses.AutoScalingResponse with the semantics of
real AWS: an action must be active (the test harness registers it, as a real Auto
Scaling group would create it when an instance starts terminating or launching),
the group and the hook must exist, and a completed action is gone.

It also adds EKS access entries and access policy associations, which moto
5.2.1 answers with 404 (the terraform module creates an access entry):
CreateAccessEntry, DescribeAccessEntry, ListAccessEntries, UpdateAccessEntry,
DeleteAccessEntry, AssociateAccessPolicy, ListAssociatedAccessPolicies,
DisassociateAccessPolicy, and the tag operations on an access entry's ARN. The
cluster must exist in moto's EKS; deleting the cluster does not delete its entries
(moto's DeleteCluster is not extended).

Extra HTTP endpoints, beside moto's own:
  POST /node-drainer/lifecycle-actions  JSON {asg, hook, instanceId, token, transition}
                                        (the instance then waits in Terminating:Wait or
                                        Pending:Wait in its group, until the action completes)
  GET  /node-drainer/lifecycle-calls    every lifecycle call, as JSON
  POST /node-drainer/eks-cluster        JSON {name, endpoint, caData}: what DescribeCluster
                                        answers for an existing cluster (moto makes them up)
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


# ---- EKS access entries -------------------------------------------------------

ACCESS_POLICY_PREFIX = "arn:aws:eks::aws:cluster-access-policy/"


class EKSError(Exception):
    def __init__(self, status, code, message):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


class AccessEntries:
    """Access entries by (cluster, principalArn), with their associated policies."""

    def __init__(self):
        self.lock = threading.Lock()
        self.entries = {}  # (cluster, principal) -> entry dict (API shape)
        self.policies = {}  # (cluster, principal) -> {policyArn: association}

    def reset(self):
        with self.lock:
            self.entries, self.policies = {}, {}


ACCESS = AccessEntries()


def _eks_cluster(name):
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.eks.models import eks_backends

    cluster = eks_backends[DEFAULT_ACCOUNT_ID][REGION].clusters.get(name)
    if cluster is None:
        raise EKSError(404, "ResourceNotFoundException", f"No cluster found for name: {name}.")
    return cluster


def _now():
    return datetime.datetime.now(datetime.timezone.utc).timestamp()


def _entry(cluster, principal):
    e = ACCESS.entries.get((cluster, principal))
    if e is None:
        raise EKSError(404, "ResourceNotFoundException",
                       f"The specified principalArn could not be found. You can view your available access entries with 'list-access-entries'.")
    return e


def _default_username(principal):
    # EKS's default for an IAM role: its assumed-role ARN with the session name.
    parts = principal.split(":", 5)
    if len(parts) == 6 and parts[5].startswith("role/"):
        role = parts[5].rsplit("/", 1)[-1]
        return f"arn:{parts[1]}:sts::{parts[4]}:assumed-role/{role}/{{{{SessionName}}}}"
    return principal


def _create_entry(cluster_name, body):
    cluster = _eks_cluster(cluster_name)
    principal = body.get("principalArn") or ""
    if not principal.startswith("arn:"):
        raise EKSError(400, "InvalidParameterException", f"The principalArn parameter format is not valid: {principal!r}")
    typ = body.get("type") or "STANDARD"
    groups = body.get("kubernetesGroups") or []
    if typ != "STANDARD" and groups:
        raise EKSError(400, "InvalidParameterException", f"kubernetesGroups cannot be specified with type {typ}")
    with ACCESS.lock:
        if (cluster_name, principal) in ACCESS.entries:
            raise EKSError(409, "ResourceInUseException", f"The specified access entry resource is already in use on this cluster.")
        parts = principal.split(":", 5)
        kind, name = (parts[5].split("/", 1) + [""])[:2] if len(parts) == 6 else ("role", principal)
        import uuid
        now = _now()
        entry = {
            "clusterName": cluster_name,
            "principalArn": principal,
            "kubernetesGroups": sorted(set(groups)),
            "accessEntryArn": f"{cluster.arn.replace(':cluster/', ':access-entry/')}/{kind}/{parts[4] if len(parts) == 6 else ''}/{name.rsplit('/', 1)[-1]}/{uuid.uuid4()}",
            "createdAt": now,
            "modifiedAt": now,
            "tags": dict(body.get("tags") or {}),
            "username": body.get("username") or _default_username(principal),
            "type": typ,
        }
        ACCESS.entries[(cluster_name, principal)] = entry
        ACCESS.policies[(cluster_name, principal)] = {}
        return {"accessEntry": entry}


def _update_entry(cluster_name, principal, body):
    _eks_cluster(cluster_name)
    with ACCESS.lock:
        e = _entry(cluster_name, principal)
        if "kubernetesGroups" in body:
            e["kubernetesGroups"] = sorted(set(body.get("kubernetesGroups") or []))
        if body.get("username"):
            e["username"] = body["username"]
        e["modifiedAt"] = _now()
        return {"accessEntry": e}


def _associate(cluster_name, principal, body):
    _eks_cluster(cluster_name)
    policy = body.get("policyArn") or ""
    if not policy.startswith(ACCESS_POLICY_PREFIX):
        raise EKSError(400, "InvalidParameterException", f"The policyArn parameter format is not valid: {policy!r}")
    scope = body.get("accessScope") or {}
    if scope.get("type") not in ("cluster", "namespace"):
        raise EKSError(400, "InvalidParameterException", "accessScope.type must be cluster or namespace")
    if scope.get("type") == "cluster" and scope.get("namespaces"):
        raise EKSError(400, "InvalidParameterException", "namespaces cannot be specified with accessScope type cluster")
    with ACCESS.lock:
        e = _entry(cluster_name, principal)
        now = _now()
        assoc = {"policyArn": policy, "accessScope": {"type": scope["type"], "namespaces": list(scope.get("namespaces") or [])},
                 "associatedAt": now, "modifiedAt": now}
        old = ACCESS.policies[(cluster_name, principal)].get(policy)
        if old:
            assoc["associatedAt"] = old["associatedAt"]
        ACCESS.policies[(cluster_name, principal)][policy] = assoc
        return {"clusterName": cluster_name, "principalArn": e["principalArn"], "associatedAccessPolicy": assoc}


def _entry_by_arn(arn):
    for e in ACCESS.entries.values():
        if e["accessEntryArn"] == arn:
            return e
    raise EKSError(404, "ResourceNotFoundException", f"Resource not found: {arn}")


def _eks_access(method, segments, query, body):
    """Serves the access-entry operations; segments are the decoded path parts."""
    if segments[0] == "tags":
        arn = segments[1]
        with ACCESS.lock:
            e = _entry_by_arn(arn)
            if method == "GET":
                return 200, {"tags": dict(e["tags"])}
            if method == "POST":
                e["tags"].update(body.get("tags") or {})
                return 200, {}
            if method == "DELETE":
                for k in query.get("tagKeys", []):
                    e["tags"].pop(k, None)
                return 200, {}
    cluster = segments[1]
    rest = segments[3:]
    if not rest:
        if method == "POST":
            return 200, _create_entry(cluster, body)
        if method == "GET":
            _eks_cluster(cluster)
            with ACCESS.lock:
                arns = sorted(p for (c, p) in ACCESS.entries if c == cluster)
            return 200, {"accessEntries": arns}
    principal = rest[0]
    if len(rest) == 1:
        if method == "GET":
            _eks_cluster(cluster)
            with ACCESS.lock:
                return 200, {"accessEntry": _entry(cluster, principal)}
        if method == "POST":
            return 200, _update_entry(cluster, principal, body)
        if method == "DELETE":
            _eks_cluster(cluster)
            with ACCESS.lock:
                _entry(cluster, principal)
                del ACCESS.entries[(cluster, principal)]
                ACCESS.policies.pop((cluster, principal), None)
            return 200, {}
    if len(rest) >= 2 and rest[1] == "access-policies":
        if len(rest) == 2 and method == "POST":
            return 200, _associate(cluster, principal, body)
        if len(rest) == 2 and method == "GET":
            _eks_cluster(cluster)
            with ACCESS.lock:
                e = _entry(cluster, principal)
                pols = [ACCESS.policies[(cluster, principal)][k] for k in sorted(ACCESS.policies[(cluster, principal)])]
            return 200, {"clusterName": cluster, "principalArn": e["principalArn"], "associatedAccessPolicies": pols}
        if len(rest) == 3 and method == "DELETE":
            _eks_cluster(cluster)
            with ACCESS.lock:
                _entry(cluster, principal)
                if ACCESS.policies[(cluster, principal)].pop(rest[2], None) is None:
                    raise EKSError(404, "ResourceNotFoundException", f"The specified policy {rest[2]} is not associated with this access entry.")
            return 200, {}
    raise EKSError(400, "InvalidRequestException", f"unsupported access-entry request {method} /{'/'.join(segments)}")


def _is_eks_access(environ, segments):
    auth = environ.get("HTTP_AUTHORIZATION", "")
    if "/eks/aws4_request" not in auth:
        return False
    if len(segments) >= 3 and segments[0] == "clusters" and segments[2] == "access-entries":
        return True
    return len(segments) == 2 and segments[0] == "tags" and ":access-entry/" in segments[1]


def _serve_eks_access(environ, segments):
    from urllib.parse import parse_qs

    request = Request(environ)
    try:
        body = json.loads(request.get_data(as_text=True) or "{}")
    except ValueError:
        body = {}
    query = parse_qs(environ.get("QUERY_STRING", ""))
    try:
        status, out = _eks_access(environ.get("REQUEST_METHOD", ""), segments, query, body)
    except EKSError as err:
        resp = _json(err.status, {"message": err.message})
        resp.headers["x-amzn-ErrorType"] = err.code
        return resp
    return _json(status, out)


def _set_eks_cluster(request):
    try:
        body = json.loads(request.get_data(as_text=True) or "{}")
        cluster = _eks_cluster(body.get("name", ""))
    except ValueError as err:
        return _json(400, {"error": f"invalid JSON: {err}"})
    except EKSError as err:
        return _json(404, {"error": err.message})
    if body.get("endpoint"):
        cluster.endpoint = body["endpoint"]
    if body.get("caData"):
        cluster.certificate_authority = {"data": body["caData"]}
    return _json(200, {"name": cluster.name, "endpoint": cluster.endpoint})


def _segments(environ):
    """The request path's segments, each percent-decoded on its own (an ARN in
    a label carries encoded slashes, which PATH_INFO has already decoded)."""
    from urllib.parse import unquote

    raw = environ.get("RAW_URI") or environ.get("REQUEST_URI") or environ.get("PATH_INFO", "")
    raw = raw.split("?", 1)[0]
    return [unquote(p) for p in raw.strip("/").split("/")]


class Extension:
    """WSGI middleware: our endpoints first, then moto."""

    def __init__(self, moto_app):
        self.moto_app = moto_app

    def __call__(self, environ, start_response):
        path = environ.get("PATH_INFO", "")
        method = environ.get("REQUEST_METHOD", "")
        if path == "/node-drainer/lifecycle-actions" and method == "POST":
            return _register(Request(environ))(environ, start_response)
        if path == "/node-drainer/lifecycle-calls" and method == "GET":
            with STORE.lock:
                calls = list(STORE.calls)
            return _json(200, calls)(environ, start_response)
        if path == "/node-drainer/eks-cluster" and method == "POST":
            return _set_eks_cluster(Request(environ))(environ, start_response)
        if path.startswith(("/clusters/", "/tags/")):
            segments = _segments(environ)
            if _is_eks_access(environ, segments):
                return _serve_eks_access(environ, segments)(environ, start_response)
        if path == "/moto-api/reset" and method == "POST":
            STORE.reset()
            ACCESS.reset()
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
