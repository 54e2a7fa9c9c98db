"""A stand-in `terraform` executable for unit tests of mqlab's own wrapper logic.

Appends its arguments to $FAKE_TF_LOG; $FAKE_TF_FAIL names a subcommand to fail.
"""

import json
import os
import sys

args = sys.argv[1:]
with open(os.environ["FAKE_TF_LOG"], "a") as f:
    f.write(json.dumps(args) + "\n")
chdir = args[0]
cmd = args[1]
fail = os.environ.get("FAKE_TF_FAIL", "")
state_ptr = os.environ["FAKE_TF_LOG"] + ".state-path"


def write_state(managed: bool) -> None:
    """Like the local backend: a state file with (or without) one managed resource."""
    if not os.path.exists(state_ptr):
        return
    with open(state_ptr) as f:
        path = f.read()
    resources = [{"mode": "managed", "type": "aws_vpc", "name": "lab"}] if managed else []
    with open(path, "w") as f:
        json.dump({"version": 4, "resources": resources}, f)


for a in args:
    if cmd == "init" and a.startswith("-backend-config=path="):
        with open(state_ptr, "w") as f:
            f.write(a.split("=", 2)[2])
if cmd == "apply":
    write_state(managed=True)  # created something (before failing, if asked to fail)


def event(**e):
    print(json.dumps(e), flush=True)


if cmd == fail:
    event(
        type="diagnostic",
        diagnostic={
            "severity": "error",
            "summary": f"{cmd} broke",
            "detail": "secret " + os.environ.get("AWS_SECRET_ACCESS_KEY", ""),
        },
    )
    sys.exit(1)
if cmd == "plan":
    event(type="planned_change", change={"action": "create"})
    event(type="change_summary", changes={"add": 2, "change": 0, "remove": 0})
    sys.exit(2)
if cmd == "destroy":
    write_state(managed=False)
if cmd == "apply" or cmd == "destroy":
    for addr in ("aws_vpc.lab", "aws_instance.broker[0]"):
        event(type="apply_complete", hook={"resource": {"addr": addr}})
    sys.exit(0)
if cmd == "output":
    host = {"index": 0, "private_ip": "10.42.0.10", "public_ip": "", "instance_id": "i-1"}
    inv = {
        "format_version": 1,
        "lab_id": "x",
        "region": "eu-west-1",
        "ssh_user": "root",
        "broker": "nats",
        "expires_at": "2030-01-01T00:00:00Z",
        "brokers": [host],
        "senders": [],
        "receivers": [],
    }
    print(json.dumps({"inventory": {"sensitive": False, "value": inv}}))
    sys.exit(0)
sys.exit(0)
