"""moto's server with node-drainer's lifecycle-action extension.

It also answers EventBridge's TestEventPattern with moto's own pattern matcher
(moto 5.2.1 answers it with an empty body).

moto 5.2.1 does not implement the Auto Scaling operations CompleteLifecycleAction
and RecordLifecycleActionHeartbeat (HTTP 500, NotImplementedError). This script
adds them to moto.autoscaling.responses.AutoScalingResponse with the semantics of
real AWS: an action must be active (the test harness registers it, as a real Auto
Scaling group would create it when an instance starts terminating or launching),
the group and the hook must exist, and a completed action is gone; an ABANDON
ends the instance's other actions too, as AWS documents. An action also ends
without a call, as in AWS: at its hook's HeartbeatTimeout (a heartbeat restarts
it) or GlobalTimeout, with the hook's DefaultResult; and when its hook is
deleted (DeleteLifecycleHook: CONTINUE for a terminating instance, ABANDON for a
launching one). The instance leaves its wait state once every action of its
transition has ended (see Store).

It also adds EKS access entries and access policy associations, which moto
5.2.1 answers with 404 (the terraform module creates an access entry):
CreateAccessEntry, DescribeAccessEntry, ListAccessEntries, UpdateAccessEntry,
DeleteAccessEntry, AssociateAccessPolicy, ListAssociatedAccessPolicies,
DisassociateAccessPolicy, and the tag operations on an access entry's ARN. The
cluster must exist in moto's EKS; deleting the cluster does not delete its entries
(moto's DeleteCluster is not extended).

And it serves CloudWatch's Smithy rpc-v2-cbor protocol, which aws-sdk-go-v2's
client (and so the terraform aws provider) speaks and moto 5.2.1 does not, for
the metric-alarm operations: PutMetricAlarm, DescribeAlarms, DeleteAlarms,
ListTagsForResource, TagResource, UntagResource, and the dashboard operations
(PutDashboard, GetDashboard, DeleteDashboards, ListDashboards), on moto's own
CloudWatch backend (the query protocol still reaches moto). Composite alarms
are not served.

And it gives EC2 hibernation, which moto 5.2.1 ignores (StopInstances with
Hibernate=true stops the instance as a plain stop, with the shutdown's state
reason): an instance launched from a launch template whose HibernationOptions
say Configured (moto drops them at launch) keeps them, and DescribeInstances
shows HibernationOptions.Configured=true for it; StopInstances with
Hibernate=true is refused for any other instance
(UnsupportedHibernationConfiguration, as EC2 does) and, for one configured,
leaves it `stopped` with the state reason EC2 gives a hibernated stop:
StateReason {Code: Client.UserInitiatedHibernate, Message:
"Client.UserInitiatedHibernate: User initiated hibernate"} and the
StateTransitionReason "User initiated (<time>)". StartInstances clears them as
for any start.

And it runs Lambda's Invoke of a function without Docker, which moto 5.2.1
needs: a function the harness has given a runtime (a Lambda Runtime API
emulator running the function's bootstrap: test/harness/lambdart) is invoked
there, synchronously, and its answer returned as Lambda returns it (the
payload, and X-Amz-Function-Error when the function failed). The terraform
module's aws_lambda_invocation reaches the function this way. A function with
no runtime is moto's, as before.

Extra HTTP endpoints, beside moto's own:
  POST /node-drainer/lifecycle-actions  JSON {asg, hook, instanceId, token, transition}
                                        (the instance then waits in Terminating:Wait or
                                        Pending:Wait in its group, until the action completes)
  GET  /node-drainer/lifecycle-calls    every lifecycle call, as JSON
  GET  /node-drainer/lifecycle-ended    every action that ended, as JSON {asg, hook, instanceId,
                                        token, transition, result, cause, time}; cause is
                                        CompleteLifecycleAction, HeartbeatTimeout, GlobalTimeout,
                                        Abandoned (another action's ABANDON) or DeleteLifecycleHook
  POST /node-drainer/lifecycle-state    JSON {asg, instanceId, state}: the instance's lifecycle
                                        state in its group, as Auto Scaling would set it for a
                                        move moto does not make; a Warmed:* state moves it into
                                        the group's warm pool (listed by DescribeWarmPool, no
                                        more by DescribeAutoScalingGroups), another back out
  POST /node-drainer/eks-cluster        JSON {name, endpoint, caData}: what DescribeCluster
                                        answers for an existing cluster (moto makes them up)
  POST /node-drainer/lambda-runtime     JSON {function, url}: Invoke of that function (of
                                        every function without its own: "*") goes to
                                        url's Invoke API (url "" forgets it)
  POST /moto-api/reset                  moto's reset, which also clears the above

A lifecycle hook keeps the NotificationMetadata it was put with (moto 5.2.1
drops it); DescribeLifecycleHooks shows it.

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
import time

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
    """Active lifecycle actions, the record of every lifecycle call, and of
    every action that ended.

    An action ends as in Auto Scaling: completed (CompleteLifecycleAction);
    with its hook's DefaultResult once the hook's HeartbeatTimeout has
    passed since the action began or since its last heartbeat, or once it
    has waited its GlobalTimeout (100 times the heartbeat timeout, at most
    48 hours: heartbeats do not extend it); with ABANDON when another action
    of its instance's transition ends with ABANDON ("ABANDON stops any
    remaining actions, such as other lifecycle hooks", the Auto Scaling user
    guide); and when its hook is deleted: CONTINUE for a terminating
    instance, ABANDON for a launching one (the DeleteLifecycleHook API
    reference). The hook's timeout and default result are read as the hook
    is now (a PutLifecycleHook that changes them applies to actions in
    flight); an action of a hook the group does not have never times out.
    The instance waits until every action of its transition has ended.
    Timeouts are evaluated on the wall clock, before every request and
    every quarter of a second (expire)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.actions = []
        self.calls = []
        self.ended = []

    def reset(self):
        with self.lock:
            self.actions = []
            self.calls = []
            self.ended = []

    def register(self, action):
        now = time.time()
        with self.lock:
            self.actions.append(dict(action, start=now, last=now))

    def record(self, operation, params, outcome, caller=""):
        now = datetime.datetime.now(datetime.timezone.utc)
        with self.lock:
            self.calls.append(
                {
                    "time": now.isoformat().replace("+00:00", "Z"),
                    "operation": operation,
                    "params": params,
                    "outcome": outcome,
                    "caller": caller,
                }
            )

    def heartbeat(self, params):
        """Restarts the heartbeat timeout of the action the call names."""
        with self.lock:
            self._find(params)["last"] = time.time()

    def complete(self, params):
        """Ends the action the call names with its result; returns the
        instance's move (see _end), or raises ValidationError."""
        with self.lock:
            return self._end(self._find(params), params["LifecycleActionResult"], "CompleteLifecycleAction", time.time())

    def expire(self):
        """Ends the actions whose timeout has passed, in the order they
        expired; moves their instances once nothing else holds them."""
        now = time.time()
        moves = []
        with self.lock:
            due = []
            for a in self.actions:
                hook = _hook_of(a["asg"], a["hook"])
                if hook is None:
                    continue
                timeout = int(hook.heartbeat_timeout)
                beat_end = a["last"] + timeout
                global_end = a["start"] + min(100 * timeout, GLOBAL_TIMEOUT_MAX)
                at = min(beat_end, global_end)
                if at <= now:
                    cause = "HeartbeatTimeout" if beat_end <= global_end else "GlobalTimeout"
                    due.append((at, a, hook.default_result or "ABANDON", cause))
            due.sort(key=lambda d: d[0])
            for at, a, result, cause in due:
                if any(x is a for x in self.actions):  # not ended by an earlier one's ABANDON
                    moves.append(self._end(a, result, cause, at))
        _move(moves)

    def delete_hook(self, asg, hook):
        """Ends the actions pending under a deleted hook."""
        now = time.time()
        moves = []
        with self.lock:
            for a in [x for x in self.actions if x["asg"] == asg and x["hook"] == hook]:
                if any(x is a for x in self.actions):
                    result = "ABANDON" if a["transition"] == LAUNCHING else "CONTINUE"
                    moves.append(self._end(a, result, "DeleteLifecycleHook", now))
        _move(moves)

    def _end(self, action, result, cause, at):
        """Ends action (self.lock held), and with ABANDON the other actions
        of its instance's transition. Returns the instance's move, (asg,
        instance, state), or None while another action still holds it."""
        self.actions = [a for a in self.actions if a is not action]
        self.ended.append(_ended(action, result, cause, at))
        same = [a for a in self.actions if a["asg"] == action["asg"] and a["instanceId"] == action["instanceId"]
                and a["transition"] == action["transition"]]
        if result == "ABANDON":
            self.actions = [a for a in self.actions if not any(a is s for s in same)]
            self.ended.extend(_ended(a, "ABANDON", "Abandoned", at) for a in same)
        elif same:
            return None
        return (action["asg"], action["instanceId"], _after(action["transition"], result))

    def _find(self, params):
        """The active action the call names (self.lock held), or raises
        ValidationError."""
        asg = params.get("AutoScalingGroupName", "")
        hook = params.get("LifecycleHookName", "")
        token = params.get("LifecycleActionToken", "")
        instance = params.get("InstanceId", "")
        for a in self.actions:
            if a["asg"] != asg or a["hook"] != hook:
                continue
            if token and a["token"] != token:
                continue
            if instance and a["instanceId"] != instance:
                continue
            return a
        if token:
            raise ValidationError(f"No active Lifecycle Action found with token {token}")
        raise ValidationError(
            f"No active Lifecycle Action found with instance ID {instance}"
        )


# An action's GlobalTimeout is 100 times its hook's heartbeat timeout, at
# most 48 hours.
GLOBAL_TIMEOUT_MAX = 172800
LAUNCHING = "autoscaling:EC2_INSTANCE_LAUNCHING"


def _utc(t):
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).isoformat().replace("+00:00", "Z")


def _ended(action, result, cause, at):
    """The record of an action that ended."""
    ended = {k: action[k] for k in ("asg", "hook", "instanceId", "token", "transition")}
    ended.update(result=result, cause=cause, time=_utc(at))
    return ended


def _hook_of(asg, name):
    """moto's lifecycle hook name of group asg, or None."""
    from moto.autoscaling.models import autoscaling_backends
    from moto.core import DEFAULT_ACCOUNT_ID

    return autoscaling_backends[DEFAULT_ACCOUNT_ID][REGION].lifecycle_hooks.get(f"{asg}_{name}")


def _move(moves):
    """Sets the lifecycle state of the instances whose last action ended."""
    for m in moves:
        if m is not None:
            _set_lifecycle_state(*m)


def _expire_forever():
    while True:
        time.sleep(0.25)
        try:
            STORE.expire()
        except Exception as err:  # a reset racing the reading: next time
            print(f"motoext: expiring lifecycle actions: {err!r}", flush=True)


STORE = Store()


def _caller(response):
    """The access key ID that signed the request (its SigV4 Authorization
    header's Credential), or "" when unsigned."""
    auth = response.headers.get("Authorization", "") or ""
    _, sep, rest = auth.partition("Credential=")
    return rest.split("/", 1)[0] if sep else ""


def _lifecycle_call(response, operation, complete):
    caller = _caller(response)
    params = {}
    for name in PARAMS:
        value = response._get_param(name)
        if value is not None:
            params[name] = str(value)
    try:
        _validate(response.autoscaling_backend, params, complete)
        move = STORE.complete(params) if complete else STORE.heartbeat(params)
    except ValidationError as err:
        STORE.record(operation, params, err.message, caller)
        raise
    STORE.record(operation, params, "ok", caller)
    _move([move])
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
    would while an action waits (moto keeps every instance InService). A
    Warmed:* state moves the instance out of the group's list into its warm
    pool (DescribeAutoScalingGroups does not list a pool's instances;
    DescribeWarmPool does); any other state moves it back."""
    from moto.autoscaling.models import autoscaling_backends
    from moto.core import DEFAULT_ACCOUNT_ID

    backend = autoscaling_backends[DEFAULT_ACCOUNT_ID][REGION]
    group = backend.autoscaling_groups.get(asg)
    if group is None:
        return
    warmed = state.startswith("Warmed:")
    with POOL_LOCK:
        st = POOL.pop((asg, instance_id), None)
        if st is None:
            st = next((s for s in group.instance_states if s.instance.id == instance_id), None)
            if st is None:
                return
            if warmed:
                group.instance_states.remove(st)
        elif not warmed:
            group.instance_states.append(st)
        st.lifecycle_state = state
        if warmed:
            POOL[(asg, instance_id)] = st


# The warm pools' instances, by (group, instance id): moto's InstanceState
# objects taken out of their group's list.
POOL = {}
POOL_LOCK = threading.Lock()


def describe_warm_pool(self):
    """DescribeWarmPool with the instances of the pool (moto lists none)."""
    from moto.core.responses import ActionResult

    name = self._get_param("AutoScalingGroupName")
    pool = self.autoscaling_backend.describe_warm_pool(group_name=name)
    with POOL_LOCK:
        instances = [{
            "InstanceId": st.instance.id,
            "InstanceType": st.instance.instance_type,
            "AvailabilityZone": st.instance.placement,
            "LifecycleState": st.lifecycle_state,
            "HealthStatus": "Healthy",
        } for (asg, _), st in POOL.items() if asg == name]
    return ActionResult({"WarmPoolConfiguration": pool, "Instances": instances})


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


# ---- EC2 hibernation ------------------------------------------------------------

HIBERNATE_REASON_CODE = "Client.UserInitiatedHibernate"


def _configured(options):
    """Whether HibernationOptions (API shape, as parsed) say Configured."""
    if not options:
        return False
    value = options.get("Configured") if isinstance(options, dict) else None
    return value is True or str(value).lower() == "true"


def _install_hibernation():
    from moto.ec2.exceptions import EC2ClientError
    from moto.ec2.models.instances import InstanceBackend, StateReason
    from moto.ec2.responses.instances import InstanceResponse
    from moto.core.utils import utcnow

    moto_run = InstanceBackend.run_instances

    def run_instances(self, image_id, count, user_data, security_group_names, **kwargs):
        # moto reads a few fields of the launch template; HibernationOptions
        # is not one of them
        if kwargs.get("launch_template") and not _configured(kwargs.get("hibernation_options")):
            tmpl = self._get_template_from_args(kwargs["launch_template"]).data
            if _configured(tmpl.get("HibernationOptions")):
                kwargs["hibernation_options"] = {"Configured": True}
        return moto_run(self, image_id, count, user_data, security_group_names, **kwargs)

    moto_stop = InstanceResponse.stop_instances

    def stop_instances(self):
        hibernate = str(self._get_param("Hibernate", False)).lower() == "true"
        instances = []
        if hibernate:
            instances = self.ec2_backend.get_multi_instances_by_id(self._get_param("InstanceIds", []))
            for inst in instances:
                if not _configured(inst.hibernation_options):
                    raise EC2ClientError(
                        "UnsupportedHibernationConfiguration",
                        f"The instance '{inst.id}' is not configured for hibernation.",
                    )
        result = moto_stop(self)
        for inst in instances:
            inst._reason = f"User initiated ({utcnow().strftime('%Y-%m-%d %H:%M:%S UTC')})"
            inst.state_reason = StateReason(
                HIBERNATE_REASON_CODE + ": User initiated hibernate", HIBERNATE_REASON_CODE)
        return result

    InstanceBackend.run_instances = run_instances
    InstanceResponse.stop_instances = stop_instances


def _install_hook_metadata():
    """A lifecycle hook keeps its NotificationMetadata, as Auto Scaling does.

    moto 5.2.1 drops it at PutLifecycleHook (and DescribeLifecycleHooks shows
    none); node-drainer's hooks carry their deployment's mark there.
    """
    put = AutoScalingResponse.put_lifecycle_hook

    def put_lifecycle_hook(self):
        result = put(self)
        name = self._get_param("LifecycleHookName")
        asg = self._get_param("AutoScalingGroupName")
        hook = self.autoscaling_backend.lifecycle_hooks.get(f"{asg}_{name}")
        if hook is not None:
            hook.notification_metadata = self._get_param("NotificationMetadata")
        return result

    AutoScalingResponse.put_lifecycle_hook = put_lifecycle_hook


def _install_hook_deletion():
    """DeleteLifecycleHook ends the actions pending under the hook, as Auto
    Scaling does (CONTINUE for a terminating instance, ABANDON for a
    launching one); moto 5.2.1 only forgets the hook."""
    delete = AutoScalingResponse.delete_lifecycle_hook

    def delete_lifecycle_hook(self):
        result = delete(self)
        STORE.delete_hook(self._get_param("AutoScalingGroupName"), self._get_param("LifecycleHookName"))
        return result

    AutoScalingResponse.delete_lifecycle_hook = delete_lifecycle_hook


def _install_capacity_reservations():
    """An instance runs in the Capacity Reservation its launch template targets.

    moto 5.2.1 ignores a launch template's CapacityReservationSpecification,
    shows no instance's CapacityReservationId and refuses DescribeInstances'
    capacity-reservation-id filter; a Capacity Block's instances are found by
    it. The reservation itself is not modelled: the instance only names it.
    """
    from moto.ec2 import utils as ec2utils
    from moto.ec2.models.instances import Instance, InstanceBackend

    Instance.capacity_reservation_id = None  # serialized as CapacityReservationId when set
    ec2utils.filter_dict_attribute_mapping["capacity-reservation-id"] = "capacity_reservation_id"
    run = InstanceBackend.run_instances

    def run_instances(self, image_id, count, user_data, security_group_names, **kwargs):
        reservation = run(self, image_id, count, user_data, security_group_names, **kwargs)
        target = None
        if kwargs.get("launch_template"):
            spec = self._get_template_from_args(kwargs["launch_template"]).data.get("CapacityReservationSpecification") or {}
            target = (spec.get("CapacityReservationTarget") or {}).get("CapacityReservationId")
        if target:
            for inst in reservation.instances:
                inst.capacity_reservation_id = target
        return reservation

    InstanceBackend.run_instances = run_instances


_install_hibernation()
_install_hook_metadata()
_install_hook_deletion()
_install_capacity_reservations()
EventsHandler.test_event_pattern = test_event_pattern
AutoScalingResponse.complete_lifecycle_action = complete_lifecycle_action
AutoScalingResponse.describe_warm_pool = describe_warm_pool
AutoScalingResponse.record_lifecycle_action_heartbeat = record_lifecycle_action_heartbeat


class Runtimes:
    """The runtime (its Invoke API's base URL) of each function the harness runs."""

    def __init__(self):
        self.lock = threading.Lock()
        self.urls = {}

    def reset(self):
        with self.lock:
            self.urls = {}

    def set(self, function, url):
        with self.lock:
            if url:
                self.urls[function] = url
            else:
                self.urls.pop(function, None)

    def get(self, function):
        with self.lock:
            return self.urls.get(function) or self.urls.get("*")


RUNTIMES = Runtimes()


def _install_lambda_runtimes():
    """Invoke of a function with a runtime goes there instead of to Docker."""
    import urllib.error
    import urllib.request

    from moto.awslambda import models

    docker_invoke = models.LambdaFunction._invoke_lambda

    def _invoke_lambda(self, event=None):
        url = RUNTIMES.get(self.function_name)
        if not url:
            return docker_invoke(self, event)
        # moto hands over the decoded body, or the string "{}" for none
        data = (event if isinstance(event, str) else json.dumps(event if event is not None else {})).encode()
        req = urllib.request.Request(
            url.rstrip("/") + "/2015-03-31/functions/" + self.function_name + "/invocations",
            data=data, method="POST",
            headers={"Content-Type": "application/json", "X-Amz-Invocation-Type": "RequestResponse"})
        try:
            with urllib.request.urlopen(req, timeout=float(self.timeout) + 30) as resp:
                return resp.read().decode(), bool(resp.headers.get("X-Amz-Function-Error")), ""
        except urllib.error.HTTPError as e:
            # the runtime refused the request (not the function's error)
            return json.dumps({"errorType": "RuntimeError", "errorMessage": f"{e.code}: {e.read().decode()}"}), True, ""
        except (urllib.error.URLError, TimeoutError, OSError) as e:
            # no runtime answered: a function error, as Lambda reports one
            # (not a 500 the caller's SDK would retry, running it again)
            return json.dumps({"errorType": "RuntimeUnreachable", "errorMessage": str(e)}), True, ""

    models.LambdaFunction._invoke_lambda = _invoke_lambda


def _set_lambda_runtime(request):
    try:
        body = json.loads(request.get_data() or b"{}")
        function, url = body["function"], body.get("url", "")
    except (ValueError, KeyError, TypeError) as e:
        return _json(400, {"message": f"want JSON {{function, url}}: {e}"})
    RUNTIMES.set(function, url)
    return _json(200, {})


_install_lambda_runtimes()


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


def _set_state(request):
    try:
        body = json.loads(request.get_data(as_text=True) or "{}")
    except ValueError as err:
        return _json(400, {"error": f"invalid JSON: {err}"})
    missing = [k for k in ("asg", "instanceId", "state") if not body.get(k)]
    if missing:
        return _json(400, {"error": "missing fields: " + ", ".join(missing)})
    _set_lifecycle_state(body["asg"], body["instanceId"], body["state"])
    return _json(200, body)


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


# ---- CloudWatch over Smithy rpc-v2-cbor ----------------------------------------
#
# aws-sdk-go-v2's CloudWatch client (and so the terraform aws provider 6.x)
# speaks Smithy's rpc-v2-cbor protocol: POST /service/GraniteServiceVersion20100801/
# operation/<Operation> with header smithy-protocol: rpc-v2-cbor and a CBOR body.
# moto 5.2.1 only speaks the query protocol for CloudWatch, so the alarm
# operations are served here by calling moto's CloudWatch backend directly.
# The CBOR codec (RFC 8949) is hand-written because the image has no CBOR
# package (no cbor2) and no package index to install one from, and moto has none.


class CBORError(ValueError):
    pass


class _Reader:
    def __init__(self, data):
        self.data, self.pos = data, 0

    def take(self, n):
        if self.pos + n > len(self.data):
            raise CBORError("truncated CBOR")
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b


_BREAK = object()


def _cbor_arg(r, info):
    if info < 24:
        return info
    if info == 24:
        return r.take(1)[0]
    if info == 25:
        return int.from_bytes(r.take(2), "big")
    if info == 26:
        return int.from_bytes(r.take(4), "big")
    if info == 27:
        return int.from_bytes(r.take(8), "big")
    raise CBORError(f"invalid additional info {info}")


def _cbor_item(r):
    import struct

    ib = r.take(1)[0]
    major, info = ib >> 5, ib & 0x1F
    if major == 7:
        if info == 20:
            return False
        if info == 21:
            return True
        if info in (22, 23):
            return None
        if info == 25:
            return struct.unpack(">e", r.take(2))[0]
        if info == 26:
            return struct.unpack(">f", r.take(4))[0]
        if info == 27:
            return struct.unpack(">d", r.take(8))[0]
        if info == 31:
            return _BREAK
        if info < 24:
            return None  # unassigned simple value
        if info == 24:
            r.take(1)
            return None
        raise CBORError(f"invalid simple value {info}")
    if info == 31:  # indefinite length
        if major in (2, 3):
            parts = []
            while True:
                part = _cbor_item(r)
                if part is _BREAK:
                    break
                parts.append(part)
            return (b"" if major == 2 else "").join(parts)
        if major == 4:
            out = []
            while True:
                v = _cbor_item(r)
                if v is _BREAK:
                    return out
                out.append(v)
        if major == 5:
            out = {}
            while True:
                k = _cbor_item(r)
                if k is _BREAK:
                    return out
                out[k] = _cbor_item(r)
        raise CBORError(f"indefinite length for major type {major}")
    n = _cbor_arg(r, info)
    if major == 0:
        return n
    if major == 1:
        return -1 - n
    if major == 2:
        return r.take(n)
    if major == 3:
        return r.take(n).decode("utf-8")
    if major == 4:
        return [_cbor_item(r) for _ in range(n)]
    if major == 5:
        out = {}
        for _ in range(n):
            k = _cbor_item(r)
            out[k] = _cbor_item(r)
        return out
    # major 6: tag
    v = _cbor_item(r)
    if n == 1:
        return datetime.datetime.fromtimestamp(v, datetime.timezone.utc)
    return v


def cbor_loads(data):
    if not data:
        return {}
    r = _Reader(data)
    v = _cbor_item(r)
    if v is _BREAK or r.pos != len(data):
        raise CBORError("malformed CBOR")
    return v


def _cbor_head(major, n):
    if n < 24:
        return bytes([major << 5 | n])
    for info, size in ((24, 1), (25, 2), (26, 4), (27, 8)):
        if n < 1 << (8 * size):
            return bytes([major << 5 | info]) + n.to_bytes(size, "big")
    raise CBORError("integer too large")


def cbor_dumps(v):
    import struct

    if v is None:
        return b"\xf6"
    if v is True:
        return b"\xf5"
    if v is False:
        return b"\xf4"
    if isinstance(v, int):
        return _cbor_head(0, v) if v >= 0 else _cbor_head(1, -1 - v)
    if isinstance(v, float):
        return b"\xfb" + struct.pack(">d", v)
    if isinstance(v, datetime.datetime):
        if v.tzinfo is None:
            v = v.replace(tzinfo=datetime.timezone.utc)
        return b"\xc1" + cbor_dumps(float(v.timestamp()))
    if isinstance(v, bytes):
        return _cbor_head(2, len(v)) + v
    if isinstance(v, str):
        b = v.encode("utf-8")
        return _cbor_head(3, len(b)) + b
    if isinstance(v, (list, tuple)):
        return _cbor_head(4, len(v)) + b"".join(cbor_dumps(x) for x in v)
    if isinstance(v, dict):
        return _cbor_head(5, len(v)) + b"".join(cbor_dumps(k) + cbor_dumps(x) for k, x in v.items())
    raise CBORError(f"cannot encode {type(v).__name__}")


CW_PATH = "/service/GraniteServiceVersion20100801/operation/"


class CWError(Exception):
    def __init__(self, code, message, status=400):
        super().__init__(message)
        self.code, self.message, self.status = code, message, status


def _cw_backend(environ):
    from moto.cloudwatch.models import cloudwatch_backends
    from moto.core import DEFAULT_ACCOUNT_ID

    region = REGION
    auth = environ.get("HTTP_AUTHORIZATION", "")
    if "Credential=" in auth:
        scope = auth.split("Credential=", 1)[1].split(",", 1)[0].split("/")
        if len(scope) >= 3 and scope[2]:
            region = scope[2]
    return cloudwatch_backends[DEFAULT_ACCOUNT_ID][region]


def _required(body, *names):
    for name in names:
        if body.get(name) in (None, ""):
            raise CWError("ValidationError",
                          f"1 validation error detected: Value null at '{name[0].lower() + name[1:]}' "
                          "failed to satisfy constraint: Member must not be null")


def _cw_metric_queries(metrics):
    from moto.cloudwatch.models import Dimension, Metric, MetricDataQuery, MetricStat

    out = []
    for m in metrics or []:
        stat = m.get("MetricStat") or {}
        metric = stat.get("Metric") or {}
        ms = None
        if metric.get("MetricName"):
            ms = MetricStat(
                metric=Metric(metric_name=metric["MetricName"], namespace=metric.get("Namespace"),
                              dimensions=[Dimension(d.get("Name"), d.get("Value")) for d in metric.get("Dimensions") or []]),
                period=stat.get("Period"), stat=stat.get("Stat"), unit=stat.get("Unit"))
        out.append(MetricDataQuery(query_id=m.get("Id"), label=m.get("Label"), period=m.get("Period"),
                                   return_data=m.get("ReturnData"), expression=m.get("Expression"), metric_stat=ms))
    return out or None


def _cw_put_metric_alarm(backend, body):
    _required(body, "AlarmName", "EvaluationPeriods", "ComparisonOperator")
    threshold = body.get("Threshold")
    backend.put_metric_alarm(
        name=body["AlarmName"],
        namespace=body.get("Namespace"),
        metric_name=body.get("MetricName"),
        metric_data_queries=_cw_metric_queries(body.get("Metrics")),
        comparison_operator=body.get("ComparisonOperator"),
        evaluation_periods=body.get("EvaluationPeriods"),
        datapoints_to_alarm=body.get("DatapointsToAlarm"),
        period=body.get("Period"),
        threshold=float(threshold) if threshold is not None else None,
        statistic=body.get("Statistic"),
        extended_statistic=body.get("ExtendedStatistic"),
        description=body.get("AlarmDescription"),
        dimensions=body.get("Dimensions") or [],
        alarm_actions=body.get("AlarmActions") or [],
        ok_actions=body.get("OKActions") or [],
        insufficient_data_actions=body.get("InsufficientDataActions") or [],
        unit=body.get("Unit"),
        actions_enabled=body.get("ActionsEnabled"),
        treat_missing_data=body.get("TreatMissingData"),
        evaluate_low_sample_count_percentile=body.get("EvaluateLowSampleCountPercentile"),
        threshold_metric_id=body.get("ThresholdMetricId"),
        rule=None,
        tags=body.get("Tags") or [],
    )
    return {}


def _cw_query(q):
    out = {"Id": q.id}
    for key, val in (("Label", q.label), ("Expression", q.expression), ("Period", q.period)):
        if val is not None:
            out[key] = int(val) if key == "Period" else val
    if q.return_data is not None:
        out["ReturnData"] = q.return_data if isinstance(q.return_data, bool) else str(q.return_data).lower() == "true"
    if q.metric_stat is not None:
        ms = q.metric_stat
        metric = {"MetricName": ms.metric.metric_name,
                  "Dimensions": [{"Name": d.name, "Value": d.value} for d in ms.metric.dimensions]}
        if ms.metric.namespace:
            metric["Namespace"] = ms.metric.namespace
        stat = {"Metric": metric, "Stat": ms.stat}
        if ms.period is not None:
            stat["Period"] = int(ms.period)
        if ms.unit:
            stat["Unit"] = ms.unit
        out["MetricStat"] = stat
    return out


def _cw_alarm(a):
    out = {
        "AlarmName": a.name,
        "AlarmArn": a.alarm_arn,
        "ActionsEnabled": bool(a.actions_enabled),
        "OKActions": list(a.ok_actions or []),
        "AlarmActions": list(a.alarm_actions or []),
        "InsufficientDataActions": list(a.insufficient_data_actions or []),
        "StateValue": a.state_value,
        "StateReason": a.state_reason,
        "StateReasonData": a.state_reason_data,
        "StateUpdatedTimestamp": a.state_updated_timestamp,
        "StateTransitionedTimestamp": a.state_updated_timestamp,
        "AlarmConfigurationUpdatedTimestamp": a.configuration_updated_timestamp,
        "Dimensions": [{"Name": d.name, "Value": d.value} for d in a.dimensions],
        "EvaluationPeriods": int(a.evaluation_periods),
        "ComparisonOperator": a.comparison_operator,
    }
    optional = (
        ("AlarmDescription", a.description, str),
        ("MetricName", a.metric_name, str),
        ("Namespace", a.namespace, str),
        ("Statistic", a.statistic, str),
        ("ExtendedStatistic", a.extended_statistic, str),
        ("Period", a.period, int),
        ("Unit", a.unit, str),
        ("DatapointsToAlarm", a.datapoints_to_alarm, int),
        ("Threshold", a.threshold, float),
        ("TreatMissingData", a.treat_missing_data, str),
        ("EvaluateLowSampleCountPercentile", a.evaluate_low_sample_count_percentile, str),
        ("ThresholdMetricId", a.threshold_metric_id, str),
    )
    for key, val, typ in optional:
        if val is not None and val != "":
            out[key] = typ(val)
    if a.metric_data_queries:
        out["Metrics"] = [_cw_query(q) for q in a.metric_data_queries]
    return out


def _cw_describe_alarms(backend, body):
    types = body.get("AlarmTypes") or []
    if body.get("ActionPrefix"):
        alarms = backend.get_alarms_by_action_prefix(body["ActionPrefix"])
    elif body.get("AlarmNamePrefix"):
        alarms = backend.get_alarms_by_alarm_name_prefix(body["AlarmNamePrefix"])
    elif body.get("AlarmNames"):
        alarms = backend.get_alarms_by_alarm_names(body["AlarmNames"])
    elif body.get("StateValue"):
        alarms = backend.get_alarms_by_state_value(body["StateValue"])
    else:
        alarms = backend.describe_alarms()
    metric = []
    if not types or "MetricAlarm" in types:
        metric = [_cw_alarm(a) for a in alarms if a.rule is None]
    # Composite alarms (AlarmRule) are not served over CBOR.
    return {"MetricAlarms": metric, "CompositeAlarms": []}


def _cw_delete_alarms(backend, body):
    _required(body, "AlarmNames")
    backend.delete_alarms(list(body["AlarmNames"]))
    return {}


def _cw_list_tags(backend, body):
    _required(body, "ResourceARN")
    tags = backend.list_tags_for_resource(body["ResourceARN"])
    return {"Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}


def _cw_tag_resource(backend, body):
    _required(body, "ResourceARN", "Tags")
    backend.tag_resource(body["ResourceARN"], list(body["Tags"]))
    return {}


def _cw_untag_resource(backend, body):
    _required(body, "ResourceARN", "TagKeys")
    backend.untag_resource(body["ResourceARN"], list(body["TagKeys"]))
    return {}


def _cw_put_dashboard(backend, body):
    _required(body, "DashboardName", "DashboardBody")
    try:
        json.loads(body["DashboardBody"])
    except ValueError:
        raise CWError("InvalidParameterInput", "The field DashboardBody must be a valid JSON object")
    backend.put_dashboard(body["DashboardName"], body["DashboardBody"])
    return {"DashboardValidationMessages": []}


def _cw_get_dashboard(backend, body):
    _required(body, "DashboardName")
    d = backend.get_dashboard(body["DashboardName"])
    if d is None:
        raise CWError("ResourceNotFound", "Dashboard " + body["DashboardName"] + " does not exist", 404)
    return {"DashboardArn": d.arn, "DashboardBody": d.body, "DashboardName": d.name}


def _cw_delete_dashboards(backend, body):
    _required(body, "DashboardNames")
    err = backend.delete_dashboards(list(body["DashboardNames"]))
    if err is not None:
        raise CWError("ResourceNotFound", err, 404)
    return {}


def _cw_list_dashboards(backend, body):
    entries = backend.list_dashboards(body.get("DashboardNamePrefix") or "")
    return {"DashboardEntries": [{"DashboardName": d.name, "DashboardArn": d.arn, "Size": d.size,
                                  "LastModified": d.last_modified} for d in entries]}


CW_OPERATIONS = {
    "PutMetricAlarm": _cw_put_metric_alarm,
    "DescribeAlarms": _cw_describe_alarms,
    "DeleteAlarms": _cw_delete_alarms,
    "ListTagsForResource": _cw_list_tags,
    "TagResource": _cw_tag_resource,
    "UntagResource": _cw_untag_resource,
    "PutDashboard": _cw_put_dashboard,
    "GetDashboard": _cw_get_dashboard,
    "DeleteDashboards": _cw_delete_dashboards,
    "ListDashboards": _cw_list_dashboards,
}


def _cbor_response(status, body, error_code=None):
    resp = Response(cbor_dumps(body), status=status, content_type="application/cbor")
    resp.headers["smithy-protocol"] = "rpc-v2-cbor"
    if error_code:
        # CloudWatch is @awsQueryCompatible: the SDK takes the query error code from this header.
        fault = "Sender" if status < 500 else "Receiver"
        resp.headers["x-amzn-query-error"] = f"{error_code};{fault}"
    return resp


def _cw_error(err):
    return _cbor_response(err.status, {"__type": f"com.amazonaws.cloudwatch#{err.code}", "message": err.message},
                          err.code)


def _serve_cloudwatch_cbor(environ, operation):
    from moto.core.exceptions import ServiceException

    handler = CW_OPERATIONS.get(operation)
    if handler is None:
        return _cw_error(CWError("UnknownOperationException",
                                 f"motoext: CloudWatch operation {operation} is not served over rpc-v2-cbor", 404))
    try:
        body = cbor_loads(Request(environ).get_data())
        if not isinstance(body, dict):
            raise CWError("SerializationException", "request body is not a CBOR map")
        out = handler(_cw_backend(environ), body)
    except CBORError as err:
        return _cw_error(CWError("SerializationException", str(err)))
    except CWError as err:
        return _cw_error(err)
    except ServiceException as err:
        code = getattr(err, "code", None) or type(err).__name__
        message = getattr(err, "message", None) or str(err)
        return _cw_error(CWError(code, message, 404 if "NotFound" in code else 400))
    return _cbor_response(200, out)


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
        STORE.expire()  # no request sees an action past its timeout
        if path == "/node-drainer/lifecycle-actions" and method == "POST":
            return _register(Request(environ))(environ, start_response)
        if path == "/node-drainer/lifecycle-state" and method == "POST":
            return _set_state(Request(environ))(environ, start_response)
        if path == "/node-drainer/lifecycle-calls" and method == "GET":
            with STORE.lock:
                calls = list(STORE.calls)
            return _json(200, calls)(environ, start_response)
        if path == "/node-drainer/lifecycle-ended" and method == "GET":
            with STORE.lock:
                ended = list(STORE.ended)
            return _json(200, ended)(environ, start_response)
        if path == "/node-drainer/lambda-runtime" and method == "POST":
            return _set_lambda_runtime(Request(environ))(environ, start_response)
        if path == "/node-drainer/eks-cluster" and method == "POST":
            return _set_eks_cluster(Request(environ))(environ, start_response)
        if path.startswith(("/clusters/", "/tags/")):
            segments = _segments(environ)
            if _is_eks_access(environ, segments):
                return _serve_eks_access(environ, segments)(environ, start_response)
        if (path.startswith(CW_PATH) and method == "POST"
                and environ.get("HTTP_SMITHY_PROTOCOL", "") == "rpc-v2-cbor"):
            return _serve_cloudwatch_cbor(environ, path[len(CW_PATH):])(environ, start_response)
        if path == "/moto-api/reset" and method == "POST":
            STORE.reset()
            with POOL_LOCK:
                POOL.clear()
            ACCESS.reset()
            RUNTIMES.reset()
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
    threading.Thread(target=_expire_forever, daemon=True).start()
    server.serve_forever()


if __name__ == "__main__":
    main()
